package leasetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// Retention is the lease retention the suite expects of the backends it is
// given (their default, leaserule.DefaultRetention).
const Retention = leaserule.DefaultRetention

// testRetention checks the retention rule (leaserule.Forgotten): once
// ExpiresAt + Retention has passed, a lease record that is no longer held and
// its request ID are forgotten (the record is gone, a reuse of the request ID
// is a new acquisition, a record nobody asks for again is pruned by a later
// acquisition), while every resource's fences keep rising; before that, a
// reuse returns the same lease; a HELD lease and a lease renewed past the
// cutoff keep their records.
func testRetention(t *testing.T, h *harness) {
	released := h.req("db/r", "alice", ttl, T0)
	rel := h.acquire(released)
	h.release(rel, T0)
	expired := h.req("db/e", "bob", ttl, T0)
	exp := h.acquire(expired)
	held := h.req("db/h", "carol", 2*Retention, T0)
	hl := h.acquire(held)
	renewedReq := h.req("db/n", "dave", ttl, T0)
	renewed := h.acquire(renewedReq)
	if _, err := h.b.Renew(h.ctx, renewed.ID, renewed.Owner, 24*time.Hour, T0.Add(ttl/2), fencegate.Guard{}); err != nil {
		t.Fatalf("renew: %v", err)
	}

	cutoff := T0.Add(ttl + Retention)
	// Just before the cutoff a reuse is the same lease.
	again := released
	again.LeaseID, again.Now = h.id("lease"), cutoff.Add(-time.Millisecond)
	if got := h.acquire(again); got.ID != rel.ID || got.FenceToken != rel.FenceToken {
		t.Fatalf("reuse before retention passed: want lease %s fence %d, got %s fence %d", rel.ID, rel.FenceToken, got.ID, got.FenceToken)
	}

	// From the cutoff on the request ID is forgotten: a new acquisition.
	again.LeaseID, again.Now = h.id("lease"), cutoff
	fresh := h.acquire(again)
	if fresh.ID == rel.ID || fresh.FenceToken <= rel.FenceToken {
		t.Fatalf("reuse after retention: want a new lease above fence %d, got %s fence %d", rel.FenceToken, fresh.ID, fresh.FenceToken)
	}
	wantState(t, fresh, fencegate.StateHeld)
	if _, err := h.b.Lease(h.ctx, rel.ID, cutoff); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("the forgotten lease's record: want NOT_FOUND, got %v", err)
	}
	// The expired lease nobody asked for again was pruned by that acquisition.
	if _, err := h.b.Lease(h.ctx, exp.ID, cutoff); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("an expired lease past retention: want its record pruned (NOT_FOUND), got %v", err)
	}
	// Its resource (whose last lease record is gone) still rises, as does
	// a reuse of its request ID.
	again = expired
	again.LeaseID, again.Now = h.id("lease"), cutoff
	if got := h.acquire(again); got.ID == exp.ID || got.FenceToken <= exp.FenceToken {
		t.Fatalf("reuse of a pruned lease's request ID: want a new lease above fence %d, got %s fence %d", exp.FenceToken, got.ID, got.FenceToken)
	}
	if got := h.acquire(h.req("db/r", "erin", ttl, cutoff.Add(ttl))); got.FenceToken <= fresh.FenceToken {
		t.Fatalf("fence after pruning: want above %d, got %d", fresh.FenceToken, got.FenceToken)
	}

	// A HELD lease keeps its record and its request ID.
	if got := h.lease(hl.ID, cutoff); got.State != fencegate.StateHeld {
		t.Fatalf("a held lease past the cutoff: want HELD, got %s", got.State)
	}
	again = held
	again.LeaseID, again.Now = h.id("lease"), cutoff
	if got := h.acquire(again); got.ID != hl.ID {
		t.Fatalf("reuse of a held lease's request ID: want lease %s, got %s", hl.ID, got.ID)
	}
	// A lease renewed counts from its new expiry.
	again = renewedReq
	again.LeaseID, again.Now = h.id("lease"), cutoff
	if got := h.acquire(again); got.ID != renewed.ID {
		t.Fatalf("reuse of a renewed lease's request ID before its new expiry + retention: want lease %s, got %s", renewed.ID, got.ID)
	}
	h.lease(renewed.ID, cutoff)
}

// testConcurrentSameRequestIDTwoResources checks that concurrent repeats of
// one (owner, request ID) naming two resources make exactly one lease and
// every other answer is that lease or REQUEST_ID_CONFLICT, never another code.
func testConcurrentSameRequestIDTwoResources(t *testing.T, h *harness) {
	const workers, rounds = 16, 8 // several rounds: the race is not won the same way each time
	for round := range rounds {
		res := []string{fmt.Sprintf("db/x%d-0", round), fmt.Sprintf("db/x%d-1", round)}
		base := h.req(res[0], "bob", ttl, T0)
		leases := make([]fencegate.Lease, workers)
		errs := make([]error, workers)
		var start, done sync.WaitGroup
		start.Add(1)
		for i := range workers {
			r := base
			r.LeaseID = h.id("lease")
			r.Resource = res[i%2]
			done.Go(func() { start.Wait(); leases[i], errs[i] = h.b.Acquire(h.ctx, r) })
		}
		start.Done()
		done.Wait()
		var won *fencegate.Lease
		for i := range workers {
			switch code := fencegate.ErrorCode(errs[i]); {
			case errs[i] == nil && won == nil:
				won = &leases[i]
			case errs[i] == nil:
				if leases[i].ID != won.ID || leases[i].FenceToken != won.FenceToken {
					t.Errorf("round %d worker %d got lease %s fence %d, another %s fence %d", round, i, leases[i].ID, leases[i].FenceToken, won.ID, won.FenceToken)
				}
			case code != fencegate.CodeRequestIDConflict:
				t.Errorf("round %d worker %d: want the lease or REQUEST_ID_CONFLICT, got %v", round, i, errs[i])
			}
		}
		if won == nil {
			t.Fatalf("round %d: no worker got the lease", round)
		}
		// Exactly one lease: the other resource has issued no fence.
		other := res[0]
		if won.Resource == res[0] {
			other = res[1]
		}
		if got := h.acquire(h.req(other, "carol", ttl, T0)); got.FenceToken != 1 {
			t.Fatalf("round %d: the losing resource issued a fence: next is %d, want 1", round, got.FenceToken)
		}
	}
}

// testPruneWithoutAcquisition checks Prune, the retention rule's pruning
// without an acquisition (a registry's periodic tick): it deletes nothing
// before expiry + Retention; under a failing guard it is
// COORDINATION_STATE_LOST and deletes nothing; then each call deletes at most
// leaserule.PruneBatch forgotten records with their request IDs and reports
// how many, until none is left, while a HELD lease and a renewed one keep
// their records, and the marker, revision and highest fence do not move.
// Every resource's fences keep rising after it.
func testPruneWithoutAcquisition(t *testing.T, h *harness) {
	const forgotten = leaserule.PruneBatch + 4
	var old []fencegate.Lease
	var reqs []fencegate.AcquireRequest
	for i := range forgotten {
		req := h.req(fmt.Sprintf("db/f%d", i), "alice", ttl, T0)
		l := h.acquire(req)
		if i%2 == 0 { // released; the others expire
			h.release(l, T0)
		}
		old, reqs = append(old, l), append(reqs, req)
	}
	held := h.req("db/h", "carol", 2*Retention, T0)
	hl := h.acquire(held)
	renewed := h.acquire(h.req("db/n", "dave", ttl, T0))
	if _, err := h.b.Renew(h.ctx, renewed.ID, renewed.Owner, 24*time.Hour, T0.Add(ttl/2), fencegate.Guard{}); err != nil {
		t.Fatalf("renew: %v", err)
	}
	cutoff := T0.Add(ttl + Retention)
	left := func() (n int) {
		t.Helper()
		for _, l := range old {
			_, err := h.b.Lease(h.ctx, l.ID, cutoff)
			switch code := fencegate.ErrorCode(err); {
			case err == nil:
				n++
			case code != fencegate.CodeNotFound:
				t.Fatalf("lease %s: %v", l.ID, err)
			}
		}
		return n
	}
	prune := func(now time.Time, g fencegate.Guard) int {
		t.Helper()
		n, err := h.b.Prune(h.ctx, now, g)
		if err != nil {
			t.Fatalf("prune at %v: %v", now, err)
		}
		return n
	}

	if n := prune(cutoff.Add(-time.Millisecond), fencegate.Guard{}); n != 0 || left() != forgotten {
		t.Fatalf("prune before expiry + retention: deleted %d, %d of %d records left", n, left(), forgotten)
	}
	inc := h.claim("", "inc-1", 0)
	for name, g := range map[string]fencegate.Guard{
		"other marker":       {Incarnation: "inc-0", MinRevision: inc.Revision},
		"revision gone back": {Incarnation: "inc-1", MinRevision: inc.Revision + 1},
	} {
		n, err := h.b.Prune(h.ctx, cutoff, g)
		if fencegate.ErrorCode(err) != fencegate.CodeStateLost || n != 0 {
			t.Fatalf("%s: prune: want COORDINATION_STATE_LOST, got %d, %v", name, n, err)
		}
		if left() != forgotten {
			t.Fatalf("%s: a refused prune deleted records: %d of %d left", name, left(), forgotten)
		}
	}

	g := fencegate.Guard{Incarnation: inc.ID, MinRevision: inc.Revision}
	if n := prune(cutoff, g); n != leaserule.PruneBatch || left() != forgotten-n {
		t.Fatalf("first prune: want %d deleted, got %d; %d of %d records left", leaserule.PruneBatch, n, left(), forgotten)
	}
	if n := prune(cutoff, g); n != forgotten-leaserule.PruneBatch || left() != 0 {
		t.Fatalf("second prune: want the other %d deleted, got %d; %d left", forgotten-leaserule.PruneBatch, n, left())
	}
	if n := prune(cutoff, g); n != 0 {
		t.Fatalf("prune with nothing forgotten: deleted %d", n)
	}
	if now := h.incarnation(); now != inc {
		t.Fatalf("prunes moved the marker, revision or highest fence: %+v -> %+v", inc, now)
	}

	// The HELD and the renewed lease keep their records and request IDs.
	if got := h.lease(hl.ID, cutoff); got.State != fencegate.StateHeld {
		t.Fatalf("a held lease after prunes: want HELD, got %s", got.State)
	}
	again := held
	again.LeaseID, again.Now, again.Guard = h.id("lease"), cutoff, g
	if got := h.acquire(again); got.ID != hl.ID {
		t.Fatalf("reuse of a held lease's request ID after prunes: want lease %s, got %s", hl.ID, got.ID)
	}
	h.lease(renewed.ID, cutoff)
	// A pruned request ID is a new acquisition, and fences keep rising.
	for _, i := range []int{0, 1} {
		again := reqs[i]
		again.LeaseID, again.Now, again.Guard = h.id("lease"), cutoff, fencegate.Guard{}
		if got := h.acquire(again); got.ID == old[i].ID || got.FenceToken <= old[i].FenceToken {
			t.Fatalf("reuse of pruned request %s: want a new lease above fence %d, got %s fence %d", reqs[i].RequestID, old[i].FenceToken, got.ID, got.FenceToken)
		}
	}
}
