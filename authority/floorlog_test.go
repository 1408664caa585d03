package authority_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/registry/embedded"
)

// Rule: the audit trail says what an operator's floor did. A floor above
// every fence known is logged as raised; one at or below the highest fence
// known (here below the floor already in force, which it does not lower) is
// logged at INFO with the requested floor and the highest fence known,
// never as raised. The registry, which knows the highest fence, logs it
// once; the authority adds no line of its own (they share one log in the
// gateway).
func TestAFloorAtOrBelowTheHighestFenceKnownIsNotLoggedAsRaised(t *testing.T) {
	e := newEnv(t, true)
	a := e.open()
	b, err := embedded.Open(filepath.Join(t.TempDir(), "registry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	reg, err := registry.New(registry.Config{Backend: b, Authority: a, Now: e.clock.Now, Log: e.cfg.Log})
	if err != nil {
		t.Fatal(err)
	}
	a.ServeFloors(reg)

	if _, err := a.SetFloor(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if logs := e.logs.String(); strings.Count(logs, `level=WARN msg="fence floor raised by an operator`) != 1 || !strings.Contains(logs, "floor=1000") {
		t.Fatalf("a raised floor is not logged as raised:\n%s", logs)
	}
	for _, lower := range []uint64{5, 0, 1000} {
		e.logs.Reset()
		st, err := a.SetFloor(ctx, lower)
		if err != nil {
			t.Fatal(err)
		}
		if st.Issuance == nil || st.Issuance.HighWater != 1000 {
			t.Fatalf("floor %d moved the highest fence known: %+v", lower, st.Issuance)
		}
		logs := e.logs.String()
		if strings.Contains(logs, "raised") && !strings.Contains(logs, "not raised") {
			t.Fatalf("floor %d at or below 1000 logged as raised:\n%s", lower, logs)
		}
		want := fmt.Sprintf(`level=INFO msg="fence floor not raised above the highest fence known" requested=%d highWater=1000`, lower)
		if strings.Count(logs, want) != 1 {
			t.Fatalf("floor %d: want %q once in:\n%s", lower, want, logs)
		}
		if strings.Contains(logs, "level=WARN") {
			t.Fatalf("floor %d that raised nothing logged a warning:\n%s", lower, logs)
		}
	}
}
