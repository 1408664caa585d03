package embedded

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// Group commit.
//
// Every write (Admit, Settle, SwapVersion, Unbind) is an op handed to one
// committer goroutine, which runs the ops queued at that moment one after
// another inside a single db.Update: they share one durable commit (bbolt's
// two fdatasyncs) instead of paying it each. An op's caller is answered only
// after that commit has returned, so an admission is durable before Admit
// returns and a settle before Settle returns, exactly as with one transaction
// per op. Ops run in queue order, each seeing the writes of those before it,
// so a batch is equivalent to running its ops one at a time in that order; ops
// of one batch were all in flight together, so any order among them is a
// valid serial order.
//
// Errors are isolated per caller:
//
//   - An op refuses by returning refuse(err) before it has written anything:
//     err is its caller's answer and the batch goes on with the next op. An
//     op that has written (a quarantine record, an admission's prior settle)
//     and then refuses keeps its refusal as a value and returns nil: its
//     writes commit with the batch.
//   - Any other error (a bbolt fault, a decoding failure, a panic) may come
//     after the op has written part of its change, so the whole transaction is
//     rolled back, the failing op is taken out and the others are run again in
//     a new transaction; the failing op is then run alone, so its caller gets
//     the answer it would have had without batching. An op may therefore run
//     more than once: it must reset whatever it reports at its start and have
//     no effect outside tx (bbolt's DB.Batch has the same rule).
//   - A failed commit answers every op of the batch with the commit's error,
//     and the store is then failed (failedCommit): every later write and read
//     is BACKEND_UNAVAILABLE until the process opens the file again. bbolt
//     writes the meta page before its fdatasync, and a sync that fails leaves
//     that page in the page cache and the shared mmap, so later transactions
//     would read, and build on, a batch no caller was told committed and that
//     a power loss may still take away: a gateway reading its own admission
//     there would forward an effect whose admission is not durable. As
//     PostgreSQL does after a failed fsync (it PANICs, data_sync_retry=off),
//     the store trusts nothing in memory after one; reopening reads what the
//     disk holds. Reads never begin inside a commit's window between its
//     meta page and its sync (durable.go), so no read answers from a batch
//     before its commit has returned.
//
// There is no fixed delay. When the committer is idle the first op runs at
// once, alone (c=1 latency is one commit, as before); ops that arrive while a
// commit is in flight form the next batch. Under load (the last batch held
// more than one op) the committer waits at most maxBatchWait, and never more
// than a quarter of the last commit's duration, for the queue to reach the
// last batch's size, and the op that reaches it wakes the committer at once:
// the wait is bounded, adaptive and absent when idle. (WithBatchGather, a
// knob for tests and the simulation, lengthens that wait and has it also
// when idle, through the same gather.)
// (bbolt's own DB.Batch waits a fixed MaxBatchDelay even for one caller and
// reruns the whole batch on every refusal, so it is not used.)
//
// A commit costs two fdatasyncs, and both are needed: bbolt writes the new
// pages, syncs them, then writes the meta page that points at them and syncs
// that. Without the first, a crash could leave a meta page on disk naming
// pages that never got there (a corrupt tree, not only a lost transaction);
// without the second, a caller could be answered before its commit is
// durable. NoSync is therefore never set; what the store cuts is the number
// of commits per op (this file) and the pages each commit writes (the
// layout's neighbouring index entries, full splits, the compact codec).
// Measured through the gateway on the embedded path (session 5, loaded
// 2-core machine): 1.00 ops per commit at c=1, 3.4 at c=8, 10.7 at c=32;
// an admission and a settle of different requests share a commit.

// maxBatchWait bounds the committer's wait for more ops under load (a
// variable for tests).
var maxBatchWait = 200 * time.Microsecond

// maxBatchOps bounds the ops of one transaction.
const maxBatchOps = 256

// batchGather is WithBatchGather's setting.
type batchGather struct {
	wait time.Duration
	ops  int
}

// WithBatchGather makes the committer, having an op to run, wait up to wait
// for ops ops (at most 256) to be queued before it runs them, also when it
// was idle: a test or simulation knob, which production never needs (the
// committer batches by itself under load, see Group commit). It lets calls
// issued together share one transaction however fast the commit before
// them was, so the batched path (several ops in one transaction, a failing
// op taken out, refusals isolated) is reached on purpose. It changes no
// guarantee: every caller is still answered only after the commit that
// carried its op has returned, and ops still run in queue order. The wait is
// bounded: it ends when the queue reaches ops, or after wait, whichever
// comes first. A wait below 1 ns or ops below 2 leaves the store as without it.
func WithBatchGather(wait time.Duration, ops int) Option {
	return func(s *Store) {
		if wait > 0 && ops > 1 {
			s.batch.gathering.Store(&batchGather{wait: wait, ops: min(ops, maxBatchOps)})
		}
	}
}

// refusal marks an op's answer that it returned before writing anything.
type refusal struct{ err error }

func (r refusal) Error() string { return r.err.Error() }

// refuse is an op's answer that leaves the transaction untouched (nil for nil).
func refuse(err error) error {
	if err == nil {
		return nil
	}
	return refusal{err}
}

var errClosed = errors.New("fence store is closed")

// failedCommit is every answer of a store whose commit failed (see Group
// commit above).
type failedCommit struct{ err error }

func (f failedCommit) Error() string {
	return "fence store: a commit failed (" + f.err.Error() + "); nothing it holds in memory is trusted: restart the gateway to reopen the file"
}

func (f failedCommit) Unwrap() error { return f.err }

// failure is the store's failedCommit as a Fencegate error, or nil while
// every commit has succeeded.
func (b *batcher) failure() error {
	if f := b.failed.Load(); f != nil {
		return fencegate.Wrap(*f, fencegate.CodeBackendUnavailable, "fence store unavailable")
	}
	return nil
}

type op struct {
	fn   func(tx *bolt.Tx) error
	done chan error
}

// batcher is the group committer of one Store.
type batcher struct {
	db      *bolt.DB
	mu      sync.Mutex
	queue   []*op
	closed  bool
	wake    chan struct{} // capacity 1: "the queue may be non-empty"
	full    chan struct{} // capacity 1: "the queue reached want"
	want    int           // the queue length gather waits for (0: not waiting)
	stopped chan struct{}

	// Read by the committer only (and by Stats).
	lastSize int
	lastDur  time.Duration

	commits, ops atomic.Uint64
	failed       atomic.Pointer[failedCommit] // set by the first failed commit, never cleared
	// barrier orders reads after the commits they may see (durable.go).
	barrier sync.RWMutex
	// commitTx commits a write transaction under the barrier ((*bolt.Tx).Commit;
	// tests wrap it to fail a commit that took effect, as a failed fdatasync
	// does, or to hold one in the window before its sync).
	commitTx func(*bolt.Tx) error
	// onReadWait, if set (tests), is called as a read starts to wait for a
	// commit (durable.go).
	onReadWait    func()
	waits, waited atomic.Uint64               // gather's waits and their total in ns
	gathering     atomic.Pointer[batchGather] // WithBatchGather (nil: off)

	// The journal's moves (journal.go): mergeEvery committed ops after the
	// last move started, the committer starts another, run in steps of their
	// own between batches (maybeMerge).
	mergeEvery atomic.Uint64
	sinceMerge uint64 // committer only: ops committed since the last move started
	steps      int    // committer only: the steps the move under way has run (0: none under way)
	merges     atomic.Uint64
	moveTxs    atomic.Uint64 // the transactions the moves ran
}

func newBatcher(db *bolt.DB) *batcher {
	b := &batcher{db: db, wake: make(chan struct{}, 1), full: make(chan struct{}, 1), stopped: make(chan struct{}), commitTx: (*bolt.Tx).Commit}
	b.mergeEvery.Store(defaultJournalMoves)
	go b.loop()
	return b
}

// do runs fn in a batched write transaction and returns its answer once the
// transaction is durable (or has failed).
func (b *batcher) do(fn func(tx *bolt.Tx) error) error {
	if err := b.failure(); err != nil {
		return err
	}
	o := &op{fn: fn, done: make(chan error, 1)}
	if !b.enqueue(o) {
		return errClosed
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return <-o.done
}

// enqueue queues o (false once closed), waking a gather the queue now fills.
func (b *batcher) enqueue(o *op) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.queue = append(b.queue, o)
	if b.want > 0 && len(b.queue) >= b.want {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
	return true
}

// close answers the ops still queued and stops the committer.
func (b *batcher) close() {
	b.mu.Lock()
	already := b.closed
	b.closed = true
	b.mu.Unlock()
	if already {
		<-b.stopped
		return
	}
	select {
	case b.wake <- struct{}{}:
	default:
	}
	<-b.stopped
}

func (b *batcher) take(n int) (ops []*op, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, len(b.queue))
	ops = append(ops, b.queue[:n]...)
	b.queue = append(b.queue[:0], b.queue[n:]...)
	return ops, b.closed && len(b.queue) == 0
}

func (b *batcher) queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

func (b *batcher) loop() {
	defer close(b.stopped)
	for range b.wake {
		for {
			want := min(b.lastSize, maxBatchOps)
			if g := b.gathering.Load(); g != nil {
				want = max(want, g.ops)
			}
			if want > 1 {
				b.gather(want)
			}
			ops, closed := b.take(maxBatchOps)
			if len(ops) > 0 {
				start := time.Now()
				b.commit(ops)
				b.lastSize, b.lastDur = len(ops), time.Since(start)
				b.maybeMerge()
			}
			if closed {
				return
			}
			if len(ops) == 0 {
				break
			}
		}
		b.lastSize = 0 // idle again: the next op runs at once
	}
}

// gather waits, boundedly, for want ops to be queued. The caller that
// fills the queue to want wakes it at once (no polling: a sleeping poll
// overslept its bound many times over on a loaded machine).
func (b *batcher) gather(want int) {
	b.mu.Lock()
	if n := len(b.queue); n == 0 || n >= want {
		b.mu.Unlock()
		return // nothing to add to (the wait starts with the next op), or enough
	}
	b.want = want
	b.mu.Unlock()
	start := time.Now()
	wait := min(maxBatchWait, b.lastDur/4)
	if g := b.gathering.Load(); g != nil {
		wait = max(wait, g.wait)
	}
	t := time.NewTimer(wait)
	select {
	case <-b.full:
	case <-t.C:
	}
	t.Stop()
	b.waits.Add(1)
	b.waited.Add(uint64(time.Since(start)))
	b.mu.Lock()
	b.want = 0
	b.mu.Unlock()
	select {
	case <-b.full: // a signal sent after the timer fired
	default:
	}
}

// commit runs ops in one transaction, isolating the ones that fail.
func (b *batcher) commit(ops []*op) {
	for len(ops) > 0 {
		if err := b.failure(); err != nil {
			for _, o := range ops {
				o.done <- err
			}
			return
		}
		answers := make([]error, len(ops))
		failed := -1
		err := b.durableUpdate(func(tx *bolt.Tx) error {
			fillAppendBuckets(tx)
			for i, o := range ops {
				err := call(o.fn, tx)
				var r refusal
				if errors.As(err, &r) {
					answers[i] = r.err
					continue
				}
				if err != nil {
					failed, answers[i] = i, err
					return err
				}
			}
			return nil
		})
		b.commits.Add(1)
		if failed >= 0 {
			o := ops[failed]
			if len(ops) == 1 {
				o.done <- answers[0]
				return
			}
			ops = append(ops[:failed:failed], ops[failed+1:]...)
			b.commit([]*op{o}) // alone, so its answer is its own
			continue
		}
		if err == nil { // committed: Stats counts the ops of committed transactions
			b.ops.Add(uint64(len(ops)))
			b.sinceMerge += uint64(len(ops))
		} else {
			b.failed.CompareAndSwap(nil, &failedCommit{err})
			err = b.failure()
		}
		for i, o := range ops {
			if err != nil {
				o.done <- err
			} else {
				o.done <- answers[i]
			}
		}
		return
	}
}

// maxMoveSteps bounds the steps of one move: writes that add to the
// journal as fast as steps take from it would otherwise keep a move going
// for ever, the journal's later buckets never reached.
const maxMoveSteps = 16

// maybeMerge starts a move of the journal once mergeEvery ops have been
// committed since the last one started, and runs it one step (a transaction
// of about moveStep bytes) after each batch until the journal is empty, so
// that the ops queued meanwhile wait for one step, not the whole move; its
// maxMoveSteps-th step moves all that is left (moveJournal: transactions of
// at most moveBudget bytes, run one after another). A move left unfinished
// when the store goes idle goes on with the next batch (or at Close). A step
// that fails keeps what its committed transactions moved and nothing of the
// one that failed (it rolls back): every entry is readable on one side or
// the other. It ends the move, which starts again once mergeEvery ops have
// been committed since it started. Move transactions are counted apart from
// the batches (MoveTxs), so a lone write is still one batch.
func (b *batcher) maybeMerge() {
	if b.failed.Load() != nil {
		return // nothing more is written over a failed commit
	}
	if b.steps == 0 {
		if b.sinceMerge < b.mergeEvery.Load() {
			return
		}
		b.sinceMerge = 0
	}
	b.steps++
	budget, limit := moveStep, 1
	if b.steps >= maxMoveSteps {
		budget, limit = moveBudget, 0
	}
	txs, empty, committing, err := moveJournal(b.db, b.durableUpdate, budget, limit)
	b.moveTxs.Add(uint64(txs))
	if committing { // a move's commit failed: as a batch's (see Group commit)
		b.failed.CompareAndSwap(nil, &failedCommit{err})
	}
	if err != nil || empty { // empty comes only with a nil error
		b.steps = 0
	}
	if empty {
		b.merges.Add(1)
	}
}

// call runs fn, turning a panic into an error of its caller's.
func call(fn func(tx *bolt.Tx) error, tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("fence store: panic in a write: %v", p)
		}
	}()
	return fn(tx)
}

// BatchStats counts the store's write transactions and the ops they carried.
type BatchStats struct {
	// Commits is the number of write transactions run (committed or not).
	Commits uint64
	// Ops is the number of ops in committed transactions.
	Ops uint64
	// Waits is the number of times the committer waited for more ops, and
	// Waited their total time.
	Waits  uint64
	Waited time.Duration
	// Merges is the number of times the committer moved the whole journal
	// into the big trees (journal.go), and MoveTxs the write transactions
	// its moves ran, which Commits does not count.
	Merges, MoveTxs uint64
}

// Failure is nil while every commit has succeeded, and after a failed one
// the error every call now answers (BACKEND_UNAVAILABLE): the gateway's
// /healthz reports it, so that an orchestrator restarts the process, which
// reopens the file.
func (s *Store) Failure() error { return s.batch.failure() }

var _ fencegate.GroupCommitter = (*Store)(nil)

// GroupCommits implements fencegate.GroupCommitter for every write of the
// store (all of them go through the batcher): the write transactions run,
// committed or not, and the ops the committed ones carried (Stats).
func (s *Store) GroupCommits() (batches, writes uint64) {
	return s.batch.commits.Load(), s.batch.ops.Load()
}

// Stats reports the store's group-commit counters.
func (s *Store) Stats() BatchStats {
	b := s.batch
	return BatchStats{Commits: b.commits.Load(), Ops: b.ops.Load(), Waits: b.waits.Load(), Waited: time.Duration(b.waited.Load()),
		Merges: b.merges.Load(), MoveTxs: b.moveTxs.Load()}
}
