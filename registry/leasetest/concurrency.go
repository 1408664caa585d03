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
