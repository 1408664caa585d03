package leasetest

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

const ttl = 10 * time.Second

func testFencesIncreasePerResource(t *testing.T, h *harness) {
	now := T0
	var last uint64
	for i := range 3 {
		l := h.acquire(h.req("db/a", "alice", ttl, now))
		if i == 0 && l.FenceToken != 1 {
			t.Fatalf("first fence of a new resource: want 1, got %d", l.FenceToken)
		}
		if l.FenceToken <= last {
			t.Fatalf("fence %d not above previous %d", l.FenceToken, last)
		}
		last = l.FenceToken
		wantState(t, l, fencegate.StateHeld)
		h.release(l, now)
		now = now.Add(time.Millisecond)
	}
	other := h.acquire(h.req("db/b", "alice", ttl, now))
	if other.FenceToken != 1 {
		t.Fatalf("another resource has its own sequence: want fence 1, got %d", other.FenceToken)
	}
}

func testSameRequestID(t *testing.T, h *harness) {
	req := h.req("db/a", "alice", ttl, T0)
	first := h.acquire(req)
	if first.ID != req.LeaseID || first.Owner != "alice" || first.Resource != "db/a" || first.RequestID != req.RequestID ||
		first.OperationID != req.OperationID || first.OperationRoot != req.OperationRoot ||
		first.OperationCategory != req.OperationCategory || first.TTL != ttl ||
		!first.AcquiredAt.Equal(T0) || !first.ExpiresAt.Equal(T0.Add(ttl)) {
		t.Fatalf("lease does not reflect its request: %+v", first)
	}
	again := req
	again.LeaseID = h.id("lease")
	again.Now = T0.Add(time.Second)
	second := h.acquire(again)
	if second.ID != first.ID || second.FenceToken != first.FenceToken || second.Revision != first.Revision ||
		!second.AcquiredAt.Equal(first.AcquiredAt) || second.TTL != first.TTL {
		t.Fatalf("repeated request: want lease %s fence %d, got %+v", first.ID, first.FenceToken, second)
	}
	wantState(t, second, fencegate.StateHeld)
	// The repeat consumed no fence.
	h.release(first, T0.Add(time.Second))
	next := h.acquire(h.req("db/a", "bob", ttl, T0.Add(time.Second)))
	if next.FenceToken != first.FenceToken+1 {
		t.Fatalf("repeat must not consume a fence: want %d, got %d", first.FenceToken+1, next.FenceToken)
	}
}

func testSameRequestIDAfterExpiry(t *testing.T, h *harness) {
	req := h.req("db/a", "alice", ttl, T0)
	first := h.acquire(req)
	later := T0.Add(ttl + time.Second)
	h.acquire(h.req("db/a", "bob", ttl, later))
	again := req
	again.LeaseID = h.id("lease")
	again.Now = later
	got := h.acquire(again)
	if got.ID != first.ID || got.FenceToken != first.FenceToken {
		t.Fatalf("repeat after expiry: want lease %s fence %d, got %+v", first.ID, first.FenceToken, got)
	}
	wantState(t, got, fencegate.StateExpired)
}

func testSameRequestIDOtherParameters(t *testing.T, h *harness) {
	req := h.req("db/a", "alice", ttl, T0)
	first := h.acquire(req)
	for name, mut := range map[string]func(*fencegate.AcquireRequest){
		"resource":           func(r *fencegate.AcquireRequest) { r.Resource = "db/b" },
		"ttl":                func(r *fencegate.AcquireRequest) { r.TTL = 2 * ttl },
		"operation id":       func(r *fencegate.AcquireRequest) { r.OperationID = "op-other" },
		"operation root":     func(r *fencegate.AcquireRequest) { r.OperationRoot = "sha256:other" },
		"operation category": func(r *fencegate.AcquireRequest) { r.OperationCategory = "delete" },
	} {
		again := req
		again.LeaseID = h.id("lease")
		again.Now = T0.Add(time.Second)
		mut(&again)
		l, err := h.b.Acquire(h.ctx, again)
		if fencegate.ErrorCode(err) != fencegate.CodeRequestIDConflict {
			t.Errorf("repeat with another %s: want REQUEST_ID_CONFLICT, got %+v, %v", name, l, err)
		}
		if _, err := h.b.Lease(h.ctx, again.LeaseID, again.Now); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
			t.Errorf("repeat with another %s created lease %s: %v", name, again.LeaseID, err)
		}
	}
	// Nothing changed: the first lease is as it was, no fence was burned on
	// either resource, and the same parameters still return the first lease.
	got := h.lease(first.ID, T0.Add(time.Second))
	if got.FenceToken != first.FenceToken || got.TTL != first.TTL || !got.ExpiresAt.Equal(first.ExpiresAt) ||
		got.OperationID != first.OperationID || got.Revision != first.Revision {
		t.Fatalf("conflicting repeats changed the lease: %+v -> %+v", first, got)
	}
	wantState(t, got, fencegate.StateHeld)
	same := req
	same.LeaseID = h.id("lease")
	if l := h.acquire(same); l.ID != first.ID || l.FenceToken != first.FenceToken {
		t.Fatalf("same parameters: want lease %s, got %+v", first.ID, l)
	}
	other := h.acquire(h.req("db/b", "bob", ttl, T0))
	if other.FenceToken != 1 {
		t.Fatalf("a conflicting repeat burned a fence of db/b: got %d", other.FenceToken)
	}
	h.release(first, T0.Add(time.Second))
	next := h.acquire(h.req("db/a", "bob", ttl, T0.Add(time.Second)))
	if next.FenceToken != first.FenceToken+1 {
		t.Fatalf("a conflicting repeat burned a fence of db/a: want %d, got %d", first.FenceToken+1, next.FenceToken)
	}
}

func testLeaseHeld(t *testing.T, h *harness) {
	held := h.acquire(h.req("db/a", "alice", ttl, T0))
	for range 3 {
		_, err := h.b.Acquire(h.ctx, h.req("db/a", "bob", ttl, T0.Add(ttl-time.Millisecond)))
		wantCode(t, err, fencegate.CodeLeaseHeld)
	}
	// The same owner with a new request ID is refused too: one holder per resource.
	_, err := h.b.Acquire(h.ctx, h.req("db/a", "alice", ttl, T0.Add(time.Second)))
	wantCode(t, err, fencegate.CodeLeaseHeld)
	next := h.acquire(h.req("db/a", "bob", ttl, T0.Add(ttl)))
	if next.FenceToken != held.FenceToken+1 {
		t.Fatalf("refused acquires must not burn fences: want %d, got %d", held.FenceToken+1, next.FenceToken)
	}
}

func testAcquireAfterExpiry(t *testing.T, h *harness) {
	old := h.acquire(h.req("db/a", "alice", ttl, T0))
	at := old.ExpiresAt // expiry is inclusive: at ExpiresAt the lease is over
	if got := h.lease(old.ID, at.Add(-time.Millisecond)); got.State != fencegate.StateHeld {
		t.Fatalf("before ExpiresAt: want HELD, got %s", got.State)
	}
	wantState(t, h.lease(old.ID, at), fencegate.StateExpired)
	next := h.acquire(h.req("db/a", "bob", ttl, at))
	if next.FenceToken <= old.FenceToken {
		t.Fatalf("new fence %d not above expired %d", next.FenceToken, old.FenceToken)
	}
	// Expired for good, even read with an earlier clock once superseded.
	wantState(t, h.lease(old.ID, at), fencegate.StateExpired)
	wantState(t, h.lease(old.ID, T0), fencegate.StateExpired)
	wantState(t, h.lease(next.ID, at), fencegate.StateHeld)
}

func testRenewExtends(t *testing.T, h *harness) {
	l := h.acquire(h.req("db/a", "alice", ttl, T0))
	now := T0.Add(8 * time.Second)
	r, err := h.b.Renew(h.ctx, l.ID, "alice", 20*time.Second, now, fencegate.Guard{})
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	if !r.ExpiresAt.Equal(now.Add(20 * time.Second)) {
		t.Fatalf("renew: want ExpiresAt %v, got %v", now.Add(20*time.Second), r.ExpiresAt)
	}
	if r.FenceToken != l.FenceToken || !r.AcquiredAt.Equal(l.AcquiredAt) || r.TTL != l.TTL {
		t.Fatalf("renew changed acquisition facts: %+v -> %+v", l, r)
	}
	wantState(t, r, fencegate.StateHeld)
	// Past the original expiry the lease is still held, so others are refused.
	_, err = h.b.Acquire(h.ctx, h.req("db/a", "bob", ttl, T0.Add(15*time.Second)))
	wantCode(t, err, fencegate.CodeLeaseHeld)
	got := h.lease(l.ID, T0.Add(15*time.Second))
	wantState(t, got, fencegate.StateHeld)
	if !got.ExpiresAt.Equal(r.ExpiresAt) {
		t.Fatalf("renewal not stored: %v vs %v", got.ExpiresAt, r.ExpiresAt)
	}
}

func testRenewNotHeld(t *testing.T, h *harness) {
	expired := h.acquire(h.req("db/a", "alice", ttl, T0))
	_, err := h.b.Renew(h.ctx, expired.ID, "alice", ttl, T0.Add(ttl), fencegate.Guard{})
	wantCode(t, err, fencegate.CodeLeaseNotHeld)

	released := h.acquire(h.req("db/b", "alice", ttl, T0))
	h.release(released, T0)
	_, err = h.b.Renew(h.ctx, released.ID, "alice", ttl, T0.Add(time.Second), fencegate.Guard{})
	wantCode(t, err, fencegate.CodeLeaseNotHeld)
	wantState(t, h.lease(released.ID, T0.Add(time.Second)), fencegate.StateReleased)
}

func testStaleRenewAfterTakeover(t *testing.T, h *harness) {
	old := h.acquire(h.req("db/a", "alice", ttl, T0))
	h.acquire(h.req("db/a", "bob", ttl, T0.Add(ttl)))
	// A renewal carrying a clock reading from before the takeover must not
	// revive the superseded lease: that would make two holders.
	_, err := h.b.Renew(h.ctx, old.ID, "alice", ttl, T0.Add(ttl-time.Millisecond), fencegate.Guard{})
	wantCode(t, err, fencegate.CodeLeaseNotHeld)
}

func testOwnerMismatch(t *testing.T, h *harness) {
	l := h.acquire(h.req("db/a", "alice", ttl, T0))
	_, err := h.b.Renew(h.ctx, l.ID, "mallory", ttl, T0, fencegate.Guard{})
	wantCode(t, err, fencegate.CodeOwnerMismatch)
	_, _, err = h.b.Release(h.ctx, l.ID, "mallory", T0, fencegate.Guard{})
	wantCode(t, err, fencegate.CodeOwnerMismatch)
	wantState(t, h.lease(l.ID, T0), fencegate.StateHeld)
}

func testReleaseThenAcquire(t *testing.T, h *harness) {
	l := h.acquire(h.req("db/a", "alice", ttl, T0))
	r := h.release(l, T0.Add(time.Second))
	wantState(t, r, fencegate.StateReleased)
	next := h.acquire(h.req("db/a", "bob", ttl, T0.Add(time.Second)))
	if next.FenceToken <= l.FenceToken {
		t.Fatalf("fence after release %d not above %d", next.FenceToken, l.FenceToken)
	}
	wantState(t, h.lease(l.ID, T0.Add(time.Second)), fencegate.StateReleased)
}

// testReleaseTwice: releasing a lease no longer held is not an error and
// returns it as it is; only the release that ended it reports released (the
// registry measures a lock handoff from that one, not from a retry).
func testReleaseTwice(t *testing.T, h *harness) {
	l := h.acquire(h.req("db/a", "alice", ttl, T0))
	if _, released := h.releaseReport(l, T0); !released {
		t.Fatal("the release that ended a HELD lease reports released false")
	}
	again, released := h.releaseReport(l, T0.Add(time.Second))
	wantState(t, again, fencegate.StateReleased)
	if released {
		t.Fatal("releasing a lease already released reports released true")
	}
	// Releasing an expired lease is fine too and reports it as expired.
	e := h.acquire(h.req("db/b", "alice", ttl, T0))
	expired, released := h.releaseReport(e, T0.Add(ttl))
	wantState(t, expired, fencegate.StateExpired)
	if released {
		t.Fatal("releasing an expired lease reports released true")
	}
}

func testNotFound(t *testing.T, h *harness) {
	_, err := h.b.Lease(h.ctx, "no-such-lease", T0)
	wantCode(t, err, fencegate.CodeNotFound)
	_, err = h.b.Renew(h.ctx, "no-such-lease", "alice", ttl, T0, fencegate.Guard{})
	wantCode(t, err, fencegate.CodeNotFound)
	_, _, err = h.b.Release(h.ctx, "no-such-lease", "alice", T0, fencegate.Guard{})
	wantCode(t, err, fencegate.CodeNotFound)
}

func testFloor(t *testing.T, h *harness) {
	a := h.acquire(h.req("db/a", "alice", ttl, T0))
	h.release(a, T0)
	if err := h.b.SetFloor(h.ctx, 1000, fencegate.Guard{}); err != nil {
		t.Fatalf("set floor: %v", err)
	}
	for _, res := range []string{"db/a", "db/new"} {
		l := h.acquire(h.req(res, "alice", ttl, T0))
		if l.FenceToken <= 1000 {
			t.Fatalf("%s: fence %d not above floor 1000", res, l.FenceToken)
		}
		h.release(l, T0)
	}
	// A lower floor changes nothing.
	if err := h.b.SetFloor(h.ctx, 5, fencegate.Guard{}); err != nil {
		t.Fatalf("set lower floor: %v", err)
	}
	low := h.acquire(h.req("db/other", "alice", ttl, T0))
	if low.FenceToken <= 1000 {
		t.Fatalf("floor went down: fence %d", low.FenceToken)
	}
	// A floor below a resource's current fence does not move that resource back.
	h.release(low, T0)
	top := h.acquire(h.req("db/other", "alice", ttl, T0))
	if top.FenceToken <= low.FenceToken {
		t.Fatalf("fence went down: %d after %d", top.FenceToken, low.FenceToken)
	}
}

func testRevision(t *testing.T, h *harness) {
	a := h.acquire(h.req("db/a", "alice", ttl, T0))
	r, err := h.b.Renew(h.ctx, a.ID, "alice", ttl, T0.Add(time.Second), fencegate.Guard{})
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	rel := h.release(r, T0.Add(time.Second))
	if r.Revision != a.Revision || rel.Revision != a.Revision {
		t.Fatalf("a lease keeps the revision of its acquisition: %d, %d, %d", a.Revision, r.Revision, rel.Revision)
	}
	if err := h.b.SetFloor(h.ctx, 10, fencegate.Guard{}); err != nil {
		t.Fatalf("set floor: %v", err)
	}
	b := h.acquire(h.req("db/b", "bob", ttl, T0.Add(time.Second)))
	// renew, release, floor and acquire each moved the global counter.
	if b.Revision < a.Revision+4 {
		t.Fatalf("revision %d after 4 mutations since %d", b.Revision, a.Revision)
	}
	// Refused operations and reads move nothing.
	_, err = h.b.Acquire(h.ctx, h.req("db/b", "carol", ttl, T0.Add(time.Second)))
	wantCode(t, err, fencegate.CodeLeaseHeld)
	h.lease(b.ID, T0.Add(time.Second))
	c := h.acquire(h.req("db/c", "carol", ttl, T0.Add(time.Second)))
	if c.Revision != b.Revision+1 {
		t.Fatalf("revision %d after %d with one mutation between", c.Revision, b.Revision)
	}
}

func testInvalidAcquire(t *testing.T, h *harness) {
	for name, mut := range map[string]func(*fencegate.AcquireRequest){
		"no lease id": func(r *fencegate.AcquireRequest) { r.LeaseID = "" },
		"no resource": func(r *fencegate.AcquireRequest) { r.Resource = "" },
		"no owner":    func(r *fencegate.AcquireRequest) { r.Owner = "" },
		"no request":  func(r *fencegate.AcquireRequest) { r.RequestID = "" },
		"zero ttl":    func(r *fencegate.AcquireRequest) { r.TTL = 0 },
	} {
		req := h.req("db/a", "alice", ttl, T0)
		mut(&req)
		_, err := h.b.Acquire(h.ctx, req)
		if fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			t.Errorf("%s: want INVALID_REQUEST, got %v", name, err)
		}
	}
	l := h.acquire(h.req("db/a", "alice", ttl, T0))
	if l.FenceToken != 1 {
		t.Fatalf("invalid requests burned fences: got %d", l.FenceToken)
	}
}
