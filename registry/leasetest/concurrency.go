package leasetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// testConcurrentAcquire races many owners for one resource over several live
// periods: each period has exactly one winner, every loser gets LEASE_HELD and
// every fence handed out is distinct and above the previous period's.
func testConcurrentAcquire(t *testing.T, h *harness) {
	const (
		rounds  = 4
		workers = 12
	)
	var last uint64
	seen := map[uint64]bool{}
	for round := range rounds {
		now := T0.Add(time.Duration(round) * ttl) // each round starts as the last lease expires
		reqs := make([]fencegate.AcquireRequest, workers)
		for i := range reqs {
			reqs[i] = h.req("db/hot", fmt.Sprintf("owner-%d", i), ttl, now)
		}
		leases := make([]fencegate.Lease, workers)
		errs := make([]error, workers)
		var start, done sync.WaitGroup
		start.Add(1)
		for i := range reqs {
			done.Go(func() {
				start.Wait()
				leases[i], errs[i] = h.b.Acquire(h.ctx, reqs[i])
			})
		}
		start.Done()
		done.Wait()
		winners := 0
		for i, err := range errs {
			switch fencegate.ErrorCode(err) {
			case "":
				winners++
				f := leases[i].FenceToken
				if seen[f] || f <= last {
					t.Fatalf("round %d: fence %d reused or not above %d", round, f, last)
				}
				seen[f] = true
				last = f
			case fencegate.CodeLeaseHeld:
			default:
				t.Fatalf("round %d: unexpected error %v", round, err)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: want exactly one winner, got %d", round, winners)
		}
	}
}

// testConcurrentRelease races several releases of one lease (a release and
// its retries): all succeed with the lease RELEASED, and exactly one reports
// that it released it, each round.
func testConcurrentRelease(t *testing.T, h *harness) {
	const (
		rounds  = 4
		workers = 8
	)
	for round := range rounds {
		now := T0.Add(time.Duration(round) * time.Second)
		l := h.acquire(h.req(fmt.Sprintf("db/rel-%d", round), "alice", ttl, now))
		leases := make([]fencegate.Lease, workers)
		released := make([]bool, workers)
		errs := make([]error, workers)
		var start, done sync.WaitGroup
		start.Add(1)
		for i := range workers {
			done.Go(func() {
				start.Wait()
				leases[i], released[i], errs[i] = h.b.Release(h.ctx, l.ID, l.Owner, now, fencegate.Guard{})
			})
		}
		start.Done()
		done.Wait()
		reported := 0
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: release: %v", round, err)
			}
			wantState(t, leases[i], fencegate.StateReleased)
			if released[i] {
				reported++
			}
		}
		if reported != 1 {
			t.Fatalf("round %d: %d of %d concurrent releases report released, want exactly 1", round, reported, workers)
		}
	}
}
