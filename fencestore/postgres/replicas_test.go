package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// replicaGrant is the grant of fence f on res: one lease and operation root
// per fence, so that any two writers with one fence may chain segments.
func replicaGrant(res string, f uint64) fencegate.VerifiedGrant {
	return fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: res, Owner: "o", Lease: fmt.Sprint("l", f),
		FenceToken: f, OperationID: fmt.Sprint("op", f), OperationRoot: fmt.Sprint("root", f), IssuedAt: int64(f)},
		Digest: "sha256:g"}
}

// TestReplicasOnOneDatabaseKeepTheFenceRules: two Stores (two gateway
// replicas, each with its own cache of what it last committed) share one
// schema; writers on each admit, settle (COMMITTED, FAILED, UNKNOWN then
// COMMITTED) and fold their settles into their next admission, on the same
// few resources and targets, with fences that go up and stale ones. Rules
// checked: no admission of a fence below one a completed read had already
// seen accepted (anywhere); highestFence never seen to decrease; at the
// end, per resource, at most one unsettled receipt and it is the pending
// mark, the live segments of the highest fence are exactly 1..last, no
// receipt above the highest fence, each target bound to the resource its
// receipts are of and its version the last COMMITTED one's. Both the fast
// path and its misses must have been exercised.
func TestReplicasOnOneDatabaseKeepTheFenceRules(t *testing.T) {
	dsn := testenv.PostgresURL(t)
	a, _ := openTraced(t, dsn)
	b, _ := openTraced(t, dsn)
	runReplicas(t, []*Store{a, b}, nil)
}

// TestReplicasWithLostAnswersKeepTheFenceRules: the same, with one in
// eight of the writes' COMMIT answers lost (lossy): every writer sends a
// call whose answer was lost again, as a gateway does, and must then get
// the replay of what committed (or the fresh answer of what did not).
func TestReplicasWithLostAnswersKeepTheFenceRules(t *testing.T) {
	dsn := testenv.PostgresURL(t)
	a, la := openLossy(t, dsn)
	b, lb := openLossy(t, dsn)
	la.random, lb.random = 8, 8
	runReplicas(t, []*Store{a, b}, []*loseAnswer{la, lb})
	t.Logf("lost answers %d", la.lost.Load()+lb.lost.Load())
	if la.lost.Load()+lb.lost.Load() == 0 {
		t.Error("no answer was lost")
	}
}

// runReplicas runs the writers of TestReplicasOnOneDatabaseKeepTheFenceRules
// on stores; with lossy, a call answered BACKEND_UNAVAILABLE is sent again.
func runReplicas(t *testing.T, stores []*Store, lossy []*loseAnswer) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	retry := func(err error) bool {
		return lossy != nil && fencegate.ErrorCode(err) == fencegate.CodeBackendUnavailable
	}
	resources := []string{"res/0", "res/1", "res/2"}
	var seen [3]atomic.Uint64 // highest fence a completed read saw per resource
	var ids atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	fail := func(format string, a ...any) {
		select {
		case errs <- fmt.Errorf(format, a...):
		default:
		}
	}
	const writers, ops = 3, 50
	for w := range 2 * writers {
		s := stores[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			type held struct{ id, res string }
			var mine *held
			var mySeen [3]uint64
			outcome := func(unknown bool) fencegate.Outcome {
				now := time.UnixMilli(1_700_000_000_000 + ids.Add(1)).UTC()
				switch n := rng.IntN(10); {
				case !unknown && n >= 8:
					return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-" + mine.id, Now: now}
				case n < 6:
					return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-" + mine.id, Now: now}
				case n < 8:
					return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: "boom", Now: now}
				default:
					return fencegate.Outcome{State: fencegate.ReceiptUnknown, Now: now}
				}
			}
			for range ops {
				ri := rng.IntN(len(resources))
				res := resources[ri]
				row, err := s.Resource(ctx, res)
				for retry(err) { // a read can meet a connection a lost answer cut
					row, err = s.Resource(ctx, res)
				}
				if err != nil && fencegate.ErrorCode(err) != fencegate.CodeNotFound {
					fail("read %s: %v", res, err)
					return
				}
				for old := seen[ri].Load(); row.HighestFence > old && !seen[ri].CompareAndSwap(old, row.HighestFence); old = seen[ri].Load() {
				}
				if row.HighestFence < mySeen[ri] {
					fail("%s: highest fence read %d after %d", res, row.HighestFence, mySeen[ri])
					return
				}
				mySeen[ri] = row.HighestFence
				if mine != nil && rng.IntN(3) == 0 {
					o := outcome(true)
					r, err := s.Settle(ctx, mine.id, o)
					for retry(err) {
						r, err = s.Settle(ctx, mine.id, o)
					}
					switch {
					case err != nil:
						fail("settle %s: %v", mine.id, err)
						return
					case r.State != fencegate.ReceiptUnknown:
						mine = nil
					}
					continue
				}
				fence := max(row.HighestFence, 1)
				seg := row.LastSegmentSeq + 1
				switch n := rng.IntN(10); {
				case n < 2 || row.HighestFence == 0:
					fence, seg = fence+1, 1
				case n < 3 && fence > 1:
					fence, seg = fence-1, 1 // stale
				}
				id := fmt.Sprintf("w%d-%d", w, ids.Add(1))
				target := res + "/k" + fmt.Sprint(rng.IntN(2))
				if rng.IntN(20) == 0 {
					target = resources[(ri+1)%len(resources)] + "/k0" // another resource's target
				}
				req := fencegate.AdmitRequest{Grant: replicaGrant(res, fence), Segment: seg, Target: target, Method: "PUT",
					PayloadDigest: "sha256:" + id, ReceiptID: id, Now: time.UnixMilli(1_700_000_000_000 + ids.Add(1)).UTC()}
				var prior *fencegate.PriorSettle
				if mine != nil {
					prior = &fencegate.PriorSettle{ReceiptID: mine.id, Outcome: outcome(mine.res == res)}
					req.Prior = prior
				}
				before := seen[ri].Load()
				adm, err := s.Admit(ctx, req)
				for uncertain := false; ; {
					if !retry(err) {
						if uncertain && err == nil && adm.Replay && adm.Receipt.ID == id {
							adm.Replay = false // what the lost answer would have said
						}
						break
					}
					uncertain = true
					adm, err = s.Admit(ctx, req)
				}
				if prior != nil {
					switch {
					case adm.Prior != nil:
						if adm.Prior.State != fencegate.ReceiptUnknown {
							mine = nil
						}
					case adm.PriorErr != nil:
						fail("prior %s of %s: %v", prior.ReceiptID, id, adm.PriorErr)
						return
					case err == nil:
						fail("admission %s with a prior answered neither Prior nor PriorErr", id)
						return
					}
				}
				switch code := fencegate.ErrorCode(err); {
				case err == nil:
					if adm.Replay {
						fail("fresh receipt %s answered as a replay", id)
						return
					}
					if fence < before {
						fail("%s admitted fence %d after fence %d was seen accepted", res, fence, before)
						return
					}
					if mine != nil {
						fail("%s admitted while this writer's %s is unsettled", res, mine.id)
						return
					}
					mine = &held{id: id, res: res}
				case code == fencegate.CodeStaleOwner, code == fencegate.CodeSegmentOutOfOrder, code == fencegate.CodeResourceBusy,
					code == fencegate.CodeQuarantined, code == fencegate.CodeResourceMismatch, code == fencegate.CodeFenceRegression:
					if prior != nil && adm.Prior == nil && adm.PriorErr == nil {
						fail("refused admission %s (%s) did not answer its prior", id, code)
						return
					}
				default:
					fail("admit %s on %s fence %d segment %d: %v", id, res, fence, seg, err)
					return
				}
			}
			for mine != nil {
				o := fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-" + mine.id,
					Now: time.UnixMilli(1_700_000_000_000 + ids.Add(1)).UTC()}
				r, err := s.Settle(ctx, mine.id, o)
				for retry(err) {
					r, err = s.Settle(ctx, mine.id, o)
				}
				if err != nil {
					fail("final settle %s: %v", mine.id, err)
					return
				}
				if r.State != fencegate.ReceiptUnknown {
					mine = nil
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkReplicaState(ctx, t, stores[0], resources)
	var fast, missed int64
	for _, s := range stores {
		fast, missed = fast+s.fast.Load(), missed+s.missed.Load()
	}
	t.Logf("fast batches %d, missed %d", fast, missed)
	if fast == 0 || missed == 0 {
		t.Errorf("fast batches %d, missed %d: both paths must have run", fast, missed)
	}
}

// checkReplicaState checks what the database holds for resources after
// every writer settled its receipts.
func checkReplicaState(ctx context.Context, t *testing.T, s *Store, resources []string) {
	t.Helper()
	for _, res := range resources {
		row, err := s.Resource(ctx, res)
		if err != nil {
			t.Fatalf("resource %s: %v", res, err)
		}
		if row.PendingReceipt != "" {
			t.Errorf("%s still pending %s after every receipt settled", res, row.PendingReceipt)
		}
		var unsettled, above int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state IN ('PENDING', 'UNKNOWN')),
			count(*) FILTER (WHERE fence_token > $2) FROM fence_receipts WHERE resource = $1`, res, row.HighestFence).Scan(&unsettled, &above); err != nil {
			t.Fatal(err)
		}
		if unsettled != 0 || above != 0 {
			t.Errorf("%s: %d unsettled receipts, %d above the highest fence %d", res, unsettled, above, row.HighestFence)
		}
		rows, err := s.pool.Query(ctx, `SELECT segment FROM fence_receipts WHERE resource = $1 AND fence_token = $2
			AND `+liveState+` ORDER BY segment`, res, row.HighestFence)
		if err != nil {
			t.Fatal(err)
		}
		var segs []uint64
		for rows.Next() {
			var seg uint64
			if err := rows.Scan(&seg); err != nil {
				t.Fatal(err)
			}
			segs = append(segs, seg)
		}
		rows.Close()
		for i, seg := range segs {
			if seg != uint64(i+1) {
				t.Errorf("%s fence %d: live segments %v, want 1..%d", res, row.HighestFence, segs, row.LastSegmentSeq)
				break
			}
		}
		if uint64(len(segs)) != row.LastSegmentSeq {
			t.Errorf("%s fence %d: live segments %v, last segment %d", res, row.HighestFence, segs, row.LastSegmentSeq)
		}
	}
	var wrongBinding, wrongVersion int
	if err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM fence_receipts r JOIN fence_targets b USING (target) WHERE b.resource <> r.resource),
		(SELECT count(*) FROM fence_targets b LEFT JOIN fence_versions v USING (target)
			WHERE v.version IS DISTINCT FROM (SELECT r.version FROM fence_receipts r WHERE r.target = b.target
				AND r.state = 'COMMITTED' ORDER BY r.fence_token DESC, r.segment DESC LIMIT 1))`).Scan(&wrongBinding, &wrongVersion); err != nil {
		t.Fatal(err)
	}
	if wrongBinding != 0 || wrongVersion != 0 {
		t.Errorf("%d receipts on a target bound elsewhere, %d targets whose version is not their last COMMITTED receipt's", wrongBinding, wrongVersion)
	}
}
