package embedded

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
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
//     err is its caller's answer and the batch goes on with the next op.
//   - Any other error (a bbolt fault, a decoding failure, a panic) may come
//     after the op has written part of its change, so the whole transaction is
//     rolled back, the failing op is taken out and the others are run again in
//     a new transaction; the failing op is then run alone, so its caller gets
//     the answer it would have had without batching. An op may therefore run
//     more than once: it must reset whatever it reports at its start and have
//     no effect outside tx (bbolt's DB.Batch has the same rule).
//   - A failed commit answers every op of the batch with the commit's error:
//     none of them is durable, whatever it decided.
//
// There is no fixed delay. When the committer is idle the first op runs at
// once, alone (c=1 latency is one commit, as before); ops that arrive while a
// commit is in flight form the next batch. Under load (the last batch held
// more than one op) the committer waits at most maxBatchWait, and never more
// than a quarter of the last commit's duration, for the queue to reach the
// last batch's size: the wait is bounded, adaptive and absent when idle.
// (bbolt's own DB.Batch waits a fixed MaxBatchDelay even for one caller and
// reruns the whole batch on every refusal, so it is not used.)

// maxBatchWait bounds the committer's wait for more ops under load.
const maxBatchWait = 200 * time.Microsecond

// maxBatchOps bounds the ops of one transaction.
const maxBatchOps = 256

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
	stopped chan struct{}

	// Read by the committer only (and by Stats).
	lastSize int
	lastDur  time.Duration

	commits, ops atomic.Uint64
}

func newBatcher(db *bolt.DB) *batcher {
	b := &batcher{db: db, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	go b.loop()
	return b
}

// do runs fn in a batched write transaction and returns its answer once the
// transaction is durable (or has failed).
func (b *batcher) do(fn func(tx *bolt.Tx) error) error {
	o := &op{fn: fn, done: make(chan error, 1)}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errClosed
	}
	b.queue = append(b.queue, o)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return <-o.done
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
			if want := min(b.lastSize, maxBatchOps); want > 1 {
				b.gather(want)
			}
			ops, closed := b.take(maxBatchOps)
			if len(ops) > 0 {
				start := time.Now()
				b.commit(ops)
				b.lastSize, b.lastDur = len(ops), time.Since(start)
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

// gather waits, boundedly, for want ops to be queued.
func (b *batcher) gather(want int) {
	if b.queued() == 0 {
		return // nothing to add to: the wait starts with the next op
	}
	deadline := time.Now().Add(min(maxBatchWait, b.lastDur/4))
	for b.queued() < want && time.Now().Before(deadline) {
		time.Sleep(20 * time.Microsecond)
	}
}

// commit runs ops in one transaction, isolating the ones that fail.
func (b *batcher) commit(ops []*op) {
	for len(ops) > 0 {
		answers := make([]error, len(ops))
		failed := -1
		err := b.db.Update(func(tx *bolt.Tx) error {
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
		b.ops.Add(uint64(len(ops)))
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
}

// Stats reports the store's group-commit counters.
func (s *Store) Stats() BatchStats {
	return BatchStats{Commits: s.batch.commits.Load(), Ops: s.batch.ops.Load()}
}
