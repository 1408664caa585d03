package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

func admitReq(res string, seg uint64, id string) fencegate.AdmitRequest {
	g := fencegate.VerifiedGrant{Grant: fencegate.Grant{
		Resource: res, Owner: "o", Lease: "l", FenceToken: 7, OperationID: "op", OperationRoot: "r", IssuedAt: 1,
	}, Digest: "sha256:g"}
	return fencegate.AdmitRequest{Grant: g, Segment: seg, Target: res, Method: "PUT", PayloadDigest: "sha256:p",
		ReceiptID: id, Now: time.UnixMilli(1_700_000_000_000).UTC()}
}

// openTemp opens a fresh store in the test's temporary directory, closed
// when the test ends.
func openTemp(t *testing.T, opts ...Option) *Store {
	t.Helper()
	s := openAt(t, filepath.Join(t.TempDir(), "fence.db"), opts...)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openAt opens the store file at path, failing t if it cannot; the test
// closes it (or crashes it) itself.
func openAt(t *testing.T, path string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hold runs an op that keeps the committer inside its transaction until the
// returned release is called, so the calls made meanwhile form one batch.
func hold(t *testing.T, s *Store) (release func()) {
	t.Helper()
	in, out := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.batch.do(func(*bolt.Tx) error { close(in); <-out; return nil })
	}()
	<-in
	return func() { close(out) }
}

// waitQueued yields until n ops are queued behind the held transaction.
func waitQueued(s *Store, n int) {
	for s.batch.queued() < n {
		runtime.Gosched()
	}
}

// TestFailedOpInABatchIsRolledBackAndRunAlone: an op that fails after writing
// (a fault, not a refusal) leaves nothing of its writes, gets its own error,
// and the admissions batched with it commit, durably.
func TestFailedOpInABatchIsRolledBackAndRunAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := openAt(t, path)
	release := hold(t, s)
	fault := errors.New("disk fault")
	var wg sync.WaitGroup
	admitErrs := make([]error, 3)
	for i := range admitErrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, admitErrs[i] = s.Admit(context.Background(), admitReq(fmt.Sprintf("res/%d", i), 1, fmt.Sprintf("r%d", i)))
		}()
	}
	var faultErr, refuseErr error
	runs := 0
	wg.Add(2)
	go func() {
		defer wg.Done()
		faultErr = s.batch.do(func(tx *bolt.Tx) error {
			runs++
			if err := tx.Bucket(bResources).Put([]byte("res/poison"), []byte("{}")); err != nil {
				return err
			}
			return fault
		})
	}()
	go func() {
		defer wg.Done()
		_, refuseErr = s.Settle(context.Background(), "no-such-receipt", fencegate.Outcome{State: fencegate.ReceiptCommitted})
	}()
	waitQueued(s, 5)
	release()
	wg.Wait()

	for i, err := range admitErrs {
		if err != nil {
			t.Fatalf("admission %d batched with a failing op: %v", i, err)
		}
	}
	if !errors.Is(faultErr, fault) || runs != 2 {
		t.Fatalf("failing op: err %v after %d runs, want its own error after a run in the batch and one alone", faultErr, runs)
	}
	if fencegate.ErrorCode(refuseErr) != fencegate.CodeNotFound {
		t.Fatalf("refused settle in the batch: %v, want NOT_FOUND", refuseErr)
	}
	// held op; the batch that failed; the batch again without it; it alone.
	if st := s.Stats(); st.Commits != 4 || st.Ops != 5 {
		t.Fatalf("stats %+v, want 4 transactions and 5 committed ops", st)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path)
	defer s.Close()
	for i := range admitErrs {
		if r, err := s.ReceiptAt(context.Background(), fmt.Sprintf("res/%d", i), 7, 1); err != nil || r.ID != fmt.Sprintf("r%d", i) {
			t.Fatalf("after reopen, admission %d: %+v, %v", i, r, err)
		}
	}
	if _, err := s.Resource(context.Background(), "res/poison"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("the failed op's write survived: %v", err)
	}
}

// TestPanickingOpAnswersOnlyItsCaller: a panic in one op is that caller's
// INTERNAL error; the op batched with it commits.
func TestPanickingOpAnswersOnlyItsCaller(t *testing.T) {
	s := openTemp(t)
	release := hold(t, s)
	var wg sync.WaitGroup
	var admitErr, panicErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, admitErr = s.Admit(context.Background(), admitReq("res/a", 1, "r1"))
	}()
	go func() {
		defer wg.Done()
		panicErr = s.batch.do(func(*bolt.Tx) error { panic("boom") })
	}()
	waitQueued(s, 2)
	release()
	wg.Wait()
	if admitErr != nil {
		t.Fatalf("admission batched with a panicking op: %v", admitErr)
	}
	if panicErr == nil {
		t.Fatal("panicking op answered nil")
	}
}

// TestIdleWriteRunsAloneAtOnce: with nothing else in flight, each write is its
// own transaction (no wait for company, no batch of one held back).
func TestIdleWriteRunsAloneAtOnce(t *testing.T) {
	s := openTemp(t)
	for i := range 3 {
		adm, err := s.Admit(context.Background(), admitReq("res/a", uint64(i+1), fmt.Sprintf("r%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Settle(context.Background(), adm.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted}); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Commits != 6 || st.Ops != 6 {
		t.Fatalf("stats %+v, want one transaction per write", st)
	}
}

// TestClosedStoreRefusesWrites: a write after Close is INTERNAL, not a hang.
func TestClosedStoreRefusesWrites(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "fence.db"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admit(context.Background(), admitReq("res/a", 1, "r1")); fencegate.ErrorCode(err) != fencegate.CodeInternal {
		t.Fatalf("admit after close: %v", err)
	}
}

// TestGatherIsWokenByTheOpThatFillsTheBatch: the committer waiting for more
// ops under load goes on as soon as the queue reaches the size it waits for,
// not when its bound ends (here an hour: the test would time out).
func TestGatherIsWokenByTheOpThatFillsTheBatch(t *testing.T) {
	defer func(d time.Duration) { maxBatchWait = d }(maxBatchWait)
	maxBatchWait = time.Hour
	b := &batcher{full: make(chan struct{}, 1), lastDur: 8 * time.Hour} // no committer loop: gather is driven here
	b.enqueue(&op{})
	done := make(chan struct{})
	go func() { b.gather(3); close(done) }()
	for {
		b.mu.Lock()
		waiting := b.want == 3
		b.mu.Unlock()
		if waiting {
			break
		}
		runtime.Gosched()
	}
	b.enqueue(&op{})
	select {
	case <-done:
		t.Fatal("gather went on with 2 of the 3 ops it waits for")
	default:
	}
	b.enqueue(&op{})
	<-done
	if st := b.waits.Load(); st != 1 {
		t.Fatalf("%d waits counted, want 1", st)
	}
}

// TestCommitterMovesALargeJournalInStepsBetweenBatches: a journal larger
// than one step is moved a step after each batch, so the next write waits
// for one step, not the whole move; every read answers the same meanwhile,
// and the move's transactions are not counted as batches.
func TestCommitterMovesALargeJournalInStepsBetweenBatches(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t, WithJournalMoves(1))
	now := time.UnixMilli(1_700_000_000_000).UTC()
	writeSegments(t, s, "res/big", 16000, now) // one op, several steps of journal
	// The committer starts the move after that batch and runs its first
	// step before it takes the next op: once that op is running, one step
	// has run and the move is not done.
	release := hold(t, s)
	if st := s.Stats(); st.MoveTxs != 1 || st.Merges != 0 {
		release()
		t.Fatalf("after the first batch: %d move transactions, %d moves done; want 1 step, the move under way", st.MoveTxs, st.Merges)
	}
	// From here on no move would start: the one under way goes on by itself.
	s.batch.mergeEvery.Store(1 << 62)
	release()
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("the move did not end after 100 more batches")
		}
		if _, err := s.Admit(ctx, admitReq(fmt.Sprintf("res/other/%d", i), 1, fmt.Sprintf("rcpt_other_%d", i))); err != nil {
			t.Fatal(err)
		}
		if row, err := s.Resource(ctx, "res/big"); err != nil || row.LastSegmentSeq != 16000 {
			t.Fatalf("Resource(res/big) during the move = %+v, %v", row, err)
		}
		if s.Stats().Merges > 0 {
			break
		}
	}
	st := s.Stats()
	if st.MoveTxs < 3 {
		t.Fatalf("the move took %d transactions: want it in steps between batches", st.MoveTxs)
	}
	if batches, _ := s.GroupCommits(); batches != st.Commits || st.Commits != st.Ops {
		t.Fatalf("batches %d, commits %d, ops %d: the move's transactions counted as batches", batches, st.Commits, st.Ops)
	}
	for _, seg := range []uint64{1, 8000, 16000} {
		if r, err := s.ReceiptAt(ctx, "res/big", 7, seg); err != nil || r.Segment != seg {
			t.Fatalf("ReceiptAt(res/big, %d) after the move = %+v, %v", seg, r, err)
		}
	}
}

// TestAMoveEndsWhileWritesOutpaceItsSteps: batches that each add more to
// the journal than a step moves do not keep a move going for ever: its
// maxMoveSteps-th step moves all that is left.
func TestAMoveEndsWhileWritesOutpaceItsSteps(t *testing.T) {
	s := openTemp(t, WithJournalMoves(1))
	now := time.UnixMilli(1_700_000_000_000).UTC()
	// Each round is two batches, the segments (more than two steps of
	// journal) and a held op; while that op is held, the committer has run
	// a step after every batch before it: 2k-1 steps in round k.
	for k := 1; k <= maxMoveSteps/2+1; k++ {
		writeSegments(t, s, fmt.Sprintf("res/%d", k), 8000, now)
		release := hold(t, s)
		st := s.Stats()
		release()
		steps := uint64(2*k - 1)
		switch {
		case steps < maxMoveSteps && (st.Merges != 0 || st.MoveTxs != steps):
			t.Fatalf("round %d: %d moves ended, %d move transactions; want the move under way after %d steps", k, st.Merges, st.MoveTxs, steps)
		case steps > maxMoveSteps && (st.Merges != 1 || st.MoveTxs != steps):
			t.Fatalf("round %d: %d moves ended (%d move transactions), want the first ended by its step %d", k, st.Merges, st.MoveTxs, maxMoveSteps)
		}
	}
}

// TestAFailedMoveStepMovesNothingAndCostsNoWrite: a move step that fails
// (here a big tree holds a bucket under a journal entry's key, so the entry
// cannot be put there) rolls back whole: the entries of the trees it had
// copied before the failure stay in the journal and the big trees are as
// they were; the writes it followed are answered, every entry stays
// readable, and no move is counted done.
func TestAFailedMoveStepMovesNothingAndCostsNoWrite(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t) // no move before the poison
	now := time.UnixMilli(1_700_000_000_000).UTC()
	writeSegments(t, s, "res/a", 5, now)
	if err := s.db.Update(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(journalOf[string(bReceipts)]).Cursor().First()
		_, err := tx.Bucket(bReceipts).CreateBucket(bytes.Clone(k))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// dump lists each journaled tree's entries, big tree and journal apart
	// (the poison, a bucket, has no value and is left out).
	dump := func() (cold, hot map[string]bool) {
		cold, hot = map[string]bool{}, map[string]bool{}
		_ = s.db.View(func(tx *bolt.Tx) error {
			for _, name := range journaled {
				for side, b := range map[*map[string]bool]*bolt.Bucket{&cold: tx.Bucket(name), &hot: tx.Bucket(journalOf[string(name)])} {
					_ = b.ForEach(func(k, v []byte) error {
						if v != nil {
							(*side)[fmt.Sprintf("%s %x %x", name, k, v)] = true
						}
						return nil
					})
				}
			}
			return nil
		})
		return cold, hot
	}
	cold0, hot0 := dump()
	st0 := s.Stats()

	s.batch.mergeEvery.Store(1) // a move after every batch from here on
	for _, res := range []string{"res/b", "res/c"} {
		if _, err := s.Admit(ctx, admitReq(res, 1, "rcpt_"+res[4:])); err != nil {
			t.Fatalf("a write beside failing move steps: %v", err)
		}
	}
	s.batch.mergeEvery.Store(1 << 62)
	if _, err := s.Admit(ctx, admitReq("res/d", 1, "rcpt_d")); err != nil { // runs after the last step
		t.Fatal(err)
	}

	st := s.Stats()
	if st.MoveTxs == st0.MoveTxs || st.Merges != st0.Merges {
		t.Fatalf("move transactions %d → %d, moves done %d → %d: want steps tried and none done", st0.MoveTxs, st.MoveTxs, st0.Merges, st.Merges)
	}
	cold, hot := dump()
	if !maps.Equal(cold, cold0) {
		t.Fatalf("the failed steps changed the big trees: %d entries, were %d", len(cold), len(cold0))
	}
	for e := range hot0 {
		if !hot[e] {
			t.Fatalf("a failed step took an entry out of the journal: %s", e)
		}
	}
	for _, seg := range []uint64{1, 5} {
		if r, err := s.ReceiptAt(ctx, "res/a", 7, seg); err != nil || r.Segment != seg {
			t.Fatalf("ReceiptAt(res/a, %d) = %+v, %v", seg, r, err)
		}
	}
	if r, err := s.ReceiptAt(ctx, "res/c", 7, 1); err != nil || r.ID != "rcpt_c" {
		t.Fatalf("ReceiptAt(res/c, 1) = %+v, %v", r, err)
	}
}

// TestBatchGatherPutsCallsIssuedTogetherInOneCommit: with WithBatchGather an
// idle committer waits for company, so admissions of different resources
// and a refused settle issued together share one transaction: each caller
// gets its own answer, the refusal costs the others nothing. The bound is an
// hour, so the committer must go on when the fourth op arrives, not when it
// ends (the test would time out).
func TestBatchGatherPutsCallsIssuedTogetherInOneCommit(t *testing.T) {
	s := openTemp(t, WithBatchGather(time.Hour, 4))
	var wg sync.WaitGroup
	admitErrs := make([]error, 3)
	for i := range admitErrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, admitErrs[i] = s.Admit(context.Background(), admitReq(fmt.Sprintf("res/%d", i), 1, fmt.Sprintf("r%d", i)))
		}()
	}
	var settleErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, settleErr = s.Settle(context.Background(), "no-such-receipt", fencegate.Outcome{State: fencegate.ReceiptCommitted})
	}()
	wg.Wait()
	for i, err := range admitErrs {
		if err != nil {
			t.Fatalf("admission %d: %v", i, err)
		}
		if _, err := s.Receipt(context.Background(), fmt.Sprintf("r%d", i)); err != nil {
			t.Fatalf("receipt r%d after its admission returned: %v", i, err)
		}
	}
	if fencegate.ErrorCode(settleErr) != fencegate.CodeNotFound {
		t.Fatalf("settle of an unknown receipt: %v, want NOT_FOUND", settleErr)
	}
	if batches, writes := s.GroupCommits(); batches != 1 || writes != 4 {
		t.Fatalf("%d transactions carried %d writes, want the 4 in one", batches, writes)
	}
}

// TestBatchGatherWaitIsBounded: a lone write under WithBatchGather waits for
// company at most the bound, then commits alone; the next lone write does
// the same (the gather holds back no op for ever).
func TestBatchGatherWaitIsBounded(t *testing.T) {
	s := openTemp(t, WithBatchGather(time.Millisecond, 4))
	for i := range 2 {
		if _, err := s.Admit(context.Background(), admitReq(fmt.Sprintf("res/%d", i), 1, fmt.Sprintf("r%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Commits != 2 || st.Ops != 2 || st.Waits != 2 {
		t.Fatalf("stats %+v, want each write alone after one bounded wait", st)
	}
}
