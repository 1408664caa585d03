package gateway_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

func TestEnforcedPatternGoesBackToShadowOnlyWithBreakGlass(t *testing.T) {
	m, err := gateway.NewModes(gateway.ModeRule{Pattern: "local/*", Mode: gateway.Shadow})
	if err != nil {
		t.Fatal(err)
	}
	if m.For("local/inv") != gateway.Shadow || m.For("other/inv") != gateway.Enforce {
		t.Fatal("modes do not follow the patterns")
	}
	if err := m.Set("local/*", gateway.Enforce, false); err != nil {
		t.Fatal(err)
	}
	if err := m.Set("local/*", gateway.Shadow, false); fencegate.ErrorCode(err) != fencegate.CodeForbidden {
		t.Fatalf("enforce -> shadow without break-glass: %v", err)
	}
	if err := m.Set("new/*", gateway.Shadow, false); fencegate.ErrorCode(err) != fencegate.CodeForbidden {
		t.Fatalf("an enforced (default) pattern went to shadow without break-glass: %v", err)
	}
	if m.For("local/inv") != gateway.Enforce {
		t.Fatal("a refused change took effect")
	}
	if err := m.Set("local/*", gateway.Shadow, true); err != nil || m.For("local/inv") != gateway.Shadow {
		t.Fatalf("break-glass: %v", err)
	}
	if err := m.Set("local/*", "off", true); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
		t.Fatalf("unknown mode: %v", err)
	}
}

// shadowAlarm records shadow verdicts.
type shadowAlarm struct{ verdicts []fencegate.Code }

func (a *shadowAlarm) FenceRegression(string, uint64, error) {}
func (a *shadowAlarm) ShadowVerdict(_, _ string, c fencegate.Code) {
	a.verdicts = append(a.verdicts, c)
}

// shadowFixture is a gateway with every local/* resource in shadow mode,
// on an embedded fence store (seen through wrap, if given) and a local
// object store, alarming to alarm.
func shadowFixture(t *testing.T, alarm gateway.Alarm, wrap ...func(*embedded.Store) fencegate.FenceStore) *fixture {
	t.Helper()
	kit := prooftest.New(t)
	emb, err := embedded.Open(filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = emb.Close() })
	var st fencegate.FenceStore = emb
	for _, w := range wrap {
		st = w(emb)
	}
	loc, err := local.New("local", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	modes, _ := gateway.NewModes(gateway.ModeRule{Pattern: "local/*", Mode: gateway.Shadow})
	gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: st, Now: kit.Now, Alarm: alarm,
		Policy: gateway.StaticPolicy{Generation: 1}, Modes: modes})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, kit: kit, store: st, obj: &faultyStore{ObjectStore: loc}, gw: gw, modes: modes}
}

func TestShadowModeRecordsTheVerdictAndForwardsWithoutMovingFences(t *testing.T) {
	alarm := &shadowAlarm{}
	f := shadowFixture(t, alarm)
	gw, st := f.gw, f.store
	ctx := context.Background()
	if _, err := gw.Apply(ctx, f.request(6, 1, "new")); err != nil {
		t.Fatal(err)
	}
	before, _ := st.Resource(ctx, resource)
	res, err := gw.Apply(ctx, f.request(5, 1, "stale")) // a stale owner
	if err != nil || res.Verdict != fencegate.CodeStaleOwner || res.Receipt.State != fencegate.ReceiptCommitted {
		t.Fatalf("shadow forward: %+v %v", res, err)
	}
	if got := f.content(); got != "stale" {
		t.Fatalf("shadow mode did not forward: %q", got)
	}
	after, _ := st.Resource(ctx, resource)
	if after != before || len(alarm.verdicts) != 1 {
		t.Fatalf("fence state moved or verdict not recorded: %+v -> %+v, %v", before, after, alarm.verdicts)
	}
	if _, err := st.Receipt(ctx, res.Receipt.ID); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("a shadow forward stored a receipt: %v", err)
	}
	// The version chain followed the forwarded write: the owner's next segment lands.
	if r, err := gw.Apply(ctx, f.request(6, 2, "new2")); err != nil || r.Verdict != "" {
		t.Fatalf("fenced write after a shadow forward: %+v %v", r, err)
	}
	if got := f.content(); got != "new2" {
		t.Fatalf("object = %q", got)
	}
}

func TestDowngradesNameEveryEnforceToShadowAndEveryRemovedEnforceRule(t *testing.T) {
	r := func(p string, m gateway.Mode) gateway.ModeRule { return gateway.ModeRule{Pattern: p, Mode: m} }
	before := []gateway.ModeRule{r("a/*", gateway.Enforce), r("b/*", gateway.Shadow), r("c/*", gateway.Enforce), r("d/*", gateway.Shadow)}
	after := []gateway.ModeRule{r("a/*", gateway.Shadow), r("b/*", gateway.Enforce), r("e/*", gateway.Shadow), r("f/*", gateway.Enforce)}
	got := gateway.Downgrades(before, after)
	want := []gateway.Downgrade{
		{Pattern: "a/*", From: gateway.Enforce, To: gateway.Shadow}, // enforce -> shadow
		{Pattern: "c/*", From: gateway.Enforce},                     // enforce rule removed
		{Pattern: "e/*", From: gateway.Enforce, To: gateway.Shadow}, // new shadow pattern: was enforced by default
	}
	if len(got) != len(want) {
		t.Fatalf("downgrades %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("downgrade %d: %v, want %v", i, got[i], want[i])
		}
	}
	if d := gateway.Downgrades(after, after); len(d) != 0 {
		t.Fatalf("an unchanged rule set downgrades %v", d)
	}
	if d := gateway.Downgrades(before, append(before, r("g/*", gateway.Enforce))); len(d) != 0 {
		t.Fatalf("adding an enforce rule downgrades %v", d)
	}
}

// Which rule wins must not depend on the order rules were given in: a
// restart with the same rules reordered would otherwise move a resource
// from enforce to shadow with no downgrade to refuse. Of equally long
// patterns matching a resource, enforce wins.
func TestModesResolveTheSameWhateverTheRuleOrder(t *testing.T) {
	shadow, enforce := gateway.ModeRule{Pattern: "d?/a", Mode: gateway.Shadow}, gateway.ModeRule{Pattern: "db/a", Mode: gateway.Enforce}
	for _, rules := range [][]gateway.ModeRule{{shadow, enforce}, {enforce, shadow}} {
		m, err := gateway.NewModes(rules...)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.For("db/a"); got != gateway.Enforce {
			t.Errorf("rules %v: db/a is %s", rules, got)
		}
		if got := m.For("dc/a"); got != gateway.Shadow {
			t.Errorf("rules %v: dc/a is %s", rules, got)
		}
	}
	if d := gateway.Downgrades([]gateway.ModeRule{shadow, enforce}, []gateway.ModeRule{enforce, shadow}); len(d) != 0 {
		t.Errorf("reordering is not a downgrade: %v", d)
	}
}

// Rule: a mode rule no resource name can match is refused (a rule taken
// and doing nothing would leave a rollout shadow while it says enforce);
// every pattern that can match a name is taken.
func TestAModeRuleNoResourceCanMatchIsRefused(t *testing.T) {
	for _, p := range []string{"roll/inv/", "/roll/inv", "roll//inv", "roll/./inv", "roll/*/", "roll/100%", `roll\\x/*`} {
		m, _ := gateway.NewModes()
		if err := m.Set(p, gateway.Enforce, false); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			t.Errorf("pattern %q: %v; want INVALID_REQUEST", p, err)
		}
		if rules := m.Rules(); len(rules) != 0 {
			t.Errorf("pattern %q: refused, yet the rules are now %+v", p, rules)
		}
	}
	for _, p := range []string{"roll/*", "roll/inv", "d?/a", "a/[bc]/*", `a/\*`, "*", "a/*\u0308"} {
		m, _ := gateway.NewModes()
		if err := m.Set(p, gateway.Enforce, false); err != nil {
			t.Errorf("pattern %q: %v", p, err)
		}
	}
}
