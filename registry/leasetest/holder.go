package leasetest

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// testHolder: a backend that implements fencegate.LeaseHolders names a
// resource's live lease, and NOT_FOUND when none holds it: never acquired,
// expired, or released. Every backend here implements it; one without the
// capability skips this rule (and operators cannot clear key bindings on it).
func testHolder(t *testing.T, h *harness) {
	hb, ok := h.b.(fencegate.LeaseHolders)
	if !ok {
		t.Skipf("%T does not implement fencegate.LeaseHolders", h.b)
	}
	none := func(resource string, now time.Time) {
		t.Helper()
		if l, err := hb.Holder(h.ctx, resource, now); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
			t.Fatalf("holder of %s at %v = %+v, %v; want NOT_FOUND", resource, now, l, err)
		}
	}
	none("db/h", T0)
	l := h.acquire(h.req("db/h", "alice", ttl, T0))
	got, err := hb.Holder(h.ctx, "db/h", T0.Add(time.Second))
	if err != nil || got.ID != l.ID || got.State != fencegate.StateHeld {
		t.Fatalf("holder = %+v, %v; want %s HELD", got, err, l.ID)
	}
	none("db/h/child", T0)
	none("db", T0)
	none("db/h", T0.Add(ttl)) // expired on the backend's clock argument
	next := h.acquire(h.req("db/h", "bob", ttl, T0.Add(ttl)))
	h.release(next, T0.Add(ttl+time.Second))
	none("db/h", T0.Add(ttl+time.Second))
}
