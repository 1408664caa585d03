package leasetest

import (
	"math"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

func (h *harness) incarnation() fencegate.Incarnation {
	h.t.Helper()
	inc, err := h.b.Incarnation(h.ctx)
	if err != nil {
		h.t.Fatalf("incarnation: %v", err)
	}
	return inc
}

func (h *harness) claim(prev, id string, floor uint64) fencegate.Incarnation {
	h.t.Helper()
	inc, err := h.b.Claim(h.ctx, prev, id, floor)
	if err != nil {
		h.t.Fatalf("claim %q over %q: %v", id, prev, err)
	}
	return inc
}

func testEmptyBackendHasNoIncarnation(t *testing.T, h *harness) {
	if inc := h.incarnation(); inc != (fencegate.Incarnation{}) {
		t.Fatalf("empty backend: want a zero incarnation, got %+v", inc)
	}
}

func testClaimWritesMarkerAndRaisesFloor(t *testing.T, h *harness) {
	old := h.acquire(h.req("db/a", "alice", ttl, T0))
	inc := h.claim("", "inc-1", 100)
	if inc.ID != "inc-1" || inc.Since <= old.Revision || inc.Revision < inc.Since || inc.HighestFence < 100 {
		t.Fatalf("claim: want marker inc-1 since a revision above %d and highest fence ≥ 100, got %+v", old.Revision, inc)
	}
	h.release(old, T0)
	req := h.req("db/a", "bob", ttl, T0)
	req.Incarnation, req.MinRevision = inc.ID, inc.Revision
	l := h.acquire(req)
	if l.FenceToken <= 100 || l.Revision <= inc.Since {
		t.Fatalf("after the claim: fence %d (want > 100), revision %d (want > %d)", l.FenceToken, l.Revision, inc.Since)
	}
	now := h.incarnation()
	if now.ID != "inc-1" || now.Since != inc.Since || now.HighestFence != l.FenceToken || now.Revision < l.Revision {
		t.Fatalf("incarnation after an acquire: %+v (lease fence %d, revision %d)", now, l.FenceToken, l.Revision)
	}
}

func testClaimOverAnotherMarkerIsStateLost(t *testing.T, h *harness) {
	h.claim("", "inc-1", 0)
	for _, prev := range []string{"", "inc-0"} {
		_, err := h.b.Claim(h.ctx, prev, "inc-2", 50)
		wantCode(t, err, fencegate.CodeStateLost)
	}
	if inc := h.incarnation(); inc.ID != "inc-1" || inc.HighestFence != 0 {
		t.Fatalf("refused claims changed the backend: %+v", inc)
	}
	h.claim("inc-1", "inc-2", 0)
}

func testAcquireUnderAnotherIncarnationIsStateLost(t *testing.T, h *harness) {
	lost := func(name string, mut func(*fencegate.AcquireRequest)) {
		t.Helper()
		req := h.req("db/a", "alice", ttl, T0)
		mut(&req)
		_, err := h.b.Acquire(h.ctx, req)
		if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
			t.Fatalf("%s: want COORDINATION_STATE_LOST, got %v", name, err)
		}
		if _, err := h.b.Lease(h.ctx, req.LeaseID, T0); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
			t.Fatalf("%s: the refused acquire left lease %s: %v", name, req.LeaseID, err)
		}
	}
	lost("unclaimed backend", func(r *fencegate.AcquireRequest) { r.Incarnation = "inc-1" })
	inc := h.claim("", "inc-1", 0)
	lost("other marker", func(r *fencegate.AcquireRequest) { r.Incarnation = "inc-0" })
	lost("revision gone back", func(r *fencegate.AcquireRequest) { r.Incarnation, r.MinRevision = "inc-1", inc.Revision+1 })
	if now := h.incarnation(); now != inc {
		t.Fatalf("refused acquires changed the backend: %+v -> %+v", inc, now)
	}
	req := h.req("db/a", "alice", ttl, T0)
	req.Incarnation, req.MinRevision = "inc-1", inc.Revision
	if l := h.acquire(req); l.FenceToken != 1 {
		t.Fatalf("refused acquires burned fences: got %d", l.FenceToken)
	}
}

func testFloorNearTheEndIsRefused(t *testing.T, h *harness) {
	for _, floor := range []uint64{math.MaxUint64, math.MaxUint64 - fencegate.MinFenceHeadroom + 1} {
		wantCode(t, h.b.SetFloor(h.ctx, floor, fencegate.Guard{}), fencegate.CodeInvalidRequest)
		_, err := h.b.Claim(h.ctx, "", "inc-1", floor)
		wantCode(t, err, fencegate.CodeInvalidRequest)
	}
	if inc := h.incarnation(); inc != (fencegate.Incarnation{}) {
		t.Fatalf("refused floors changed the backend: %+v", inc)
	}
	if l := h.acquire(h.req("db/a", "alice", ttl, T0)); l.FenceToken != 1 {
		t.Fatalf("after refused floors: fence %d, want 1", l.FenceToken)
	}
}

// testRepeatAndHeldAcquireUnderAnotherIncarnationAreStateLost: an acquire's
// guard is checked before anything else it answers, so a repeat of a request
// ID (which would hand back a lease of a restored copy) and an acquire of a
// held resource (which would keep acquirers waiting on it) are
// COORDINATION_STATE_LOST under a failing guard, as a fresh acquire is, and
// change nothing.
func testRepeatAndHeldAcquireUnderAnotherIncarnationAreStateLost(t *testing.T, h *harness) {
	inc := h.claim("", "inc-1", 0)
	req := h.req("db/a", "alice", ttl, T0)
	req.Incarnation, req.MinRevision = inc.ID, inc.Revision
	l := h.acquire(req)
	for name, g := range map[string]fencegate.Guard{
		"other marker":       {Incarnation: "inc-0", MinRevision: inc.Revision},
		"revision gone back": {Incarnation: inc.ID, MinRevision: l.Revision + 5},
	} {
		before := h.incarnation()
		again := req
		again.LeaseID, again.Guard = "again-"+req.LeaseID, g
		if got, err := h.b.Acquire(h.ctx, again); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
			t.Fatalf("%s: repeat of request %s: want COORDINATION_STATE_LOST, got lease %s fence %d, %v", name, req.RequestID, got.ID, got.FenceToken, err)
		}
		other := h.req("db/a", "bob", ttl, T0)
		other.Guard = g
		if _, err := h.b.Acquire(h.ctx, other); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
			t.Fatalf("%s: acquire of the held resource: want COORDINATION_STATE_LOST, got %v", name, err)
		}
		if now := h.incarnation(); now != before {
			t.Fatalf("%s: refused acquires changed the backend: %+v -> %+v", name, before, now)
		}
		if got := h.lease(l.ID, T0); got.State != fencegate.StateHeld || got.FenceToken != l.FenceToken {
			t.Fatalf("%s: refused acquires changed the lease: %+v -> %+v", name, l, got)
		}
	}
}

// testRenewReleaseAndFloorUnderAnotherIncarnationAreStateLost: the guard is checked
// first in renewals, releases and floors too, so that they cannot move a restored
// copy's revision back up to the one its registry saw (which would hide the
// rollback from the next acquire's guard); a refused one changes nothing.
func testRenewReleaseAndFloorUnderAnotherIncarnationAreStateLost(t *testing.T, h *harness) {
	l := h.acquire(h.req("db/a", "alice", ttl, T0))
	lost := func(name string, g fencegate.Guard) {
		t.Helper()
		before := h.incarnation()
		for _, id := range []string{l.ID, "no-such-lease"} {
			_, err := h.b.Renew(h.ctx, id, l.Owner, ttl, T0.Add(time.Second), g)
			if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
				t.Fatalf("%s: renew %s: want COORDINATION_STATE_LOST, got %v", name, id, err)
			}
			_, _, err = h.b.Release(h.ctx, id, l.Owner, T0.Add(time.Second), g)
			if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
				t.Fatalf("%s: release %s: want COORDINATION_STATE_LOST, got %v", name, id, err)
			}
		}
		if err := h.b.SetFloor(h.ctx, 1000, g); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
			t.Fatalf("%s: floor: want COORDINATION_STATE_LOST, got %v", name, err)
		}
		if now := h.incarnation(); now != before {
			t.Fatalf("%s: refused renewals and releases changed the backend: %+v -> %+v", name, before, now)
		}
		if got := h.lease(l.ID, T0.Add(time.Second)); got.State != fencegate.StateHeld || !got.ExpiresAt.Equal(l.ExpiresAt) {
			t.Fatalf("%s: refused renewals and releases changed the lease: %+v -> %+v", name, l, got)
		}
	}
	lost("unclaimed backend", fencegate.Guard{Incarnation: "inc-1"})
	inc := h.claim("", "inc-1", 0)
	lost("other marker", fencegate.Guard{Incarnation: "inc-0", MinRevision: inc.Revision})
	lost("revision gone back", fencegate.Guard{Incarnation: "inc-1", MinRevision: inc.Revision + 1})
	g := fencegate.Guard{Incarnation: "inc-1", MinRevision: inc.Revision}
	r, err := h.b.Renew(h.ctx, l.ID, l.Owner, ttl, T0.Add(time.Second), g)
	if err != nil || !r.ExpiresAt.Equal(T0.Add(time.Second+ttl)) {
		t.Fatalf("renew under the backend's own guard: %+v, %v", r, err)
	}
	if after := h.incarnation(); after.Revision <= inc.Revision {
		t.Fatalf("an accepted renewal must move the revision: %d -> %d", inc.Revision, after.Revision)
	}
	if r, released, err := h.b.Release(h.ctx, l.ID, l.Owner, T0.Add(2*time.Second), g); err != nil || r.State != fencegate.StateReleased || !released {
		t.Fatalf("release under the backend's own guard: %+v, released %v, %v", r, released, err)
	}
	if err := h.b.SetFloor(h.ctx, 1000, fencegate.Guard{Incarnation: "inc-1", MinRevision: h.incarnation().Revision}); err != nil {
		t.Fatalf("floor under the backend's own guard: %v", err)
	}
	if inc := h.incarnation(); inc.HighestFence != 1000 {
		t.Fatalf("floor under the backend's own guard not kept: %+v", inc)
	}
}
