package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
)

// Group commit. Concurrent Admits and Settles are gathered into batches
// together (one group of writeCalls, batch.go), one transaction each, so that
// callers share a COMMIT and a WAL flush whatever their kind. No caller
// waits for a timer to gather others: a caller that finds a free slot
// starts a batch at once with whatever is queued (a lone caller waits for
// nothing); up to slots batches run at once, each on a connection of its
// own, a new one beside those running only once at least as many callers
// wait as the running batches carry, or once no batch has started for
// stallAfter (the running ones are stalled, on a row lock held elsewhere
// say: the only timer, which callers left queued beside running batches
// arm); callers that may not start a batch queue up and go together in the
// next one. Batch sizes therefore follow the load: one member each while
// calls are rare (the latency of one transaction, and a second caller starts
// beside the first at once), larger as they crowd, so commits per call fall
// as concurrency grows. Postgres overlaps the batches in flight (one runs
// its statements while another waits for its WAL flush, and concurrent
// commits share a flush), so a call does not wait behind a single batch, and
// a batch stalled on a row lock held elsewhere holds up only its own
// members (others start beside it stallAfter after the last batch began).
//
// A member's result is delivered only after its batch's COMMIT was
// acknowledged, so everything the store reports as done is durable, exactly
// as with one transaction per call. No key (a resource, target or settled
// receipt a member touches) is in two running batches, nor twice in one: a
// call on a key that a running batch holds waits for a batch after it. That
// keeps the per-resource order of calls, admissions and settles alike, lets
// a batch decide every member from one read, and keeps this store's batches
// from waiting on each other's row locks (or missing each other's
// compare-and-set, fast.go). The one exception is a settle of a receipt this
// process does not know (Settle): it holds only the receipt's ID, so it may
// meet another batch on its resource, where the row lock orders them (a fast
// one that loses misses and runs again locked), or share a batch with a
// member on its resource, which the locked path decides in batch order.

const (
	// defaultSlots is how many write batches may run at once when the pool
	// size is not configured (Open sizes the pool for it).
	defaultSlots = 8
	// maxBatch bounds the members of one batch.
	maxBatch = 64
	// stallAfter is how long after the last batch started the running ones
	// are taken for stalled, so that callers queued beside them start a
	// batch of their own in a free slot (the growth rule would keep them
	// waiting until a stalled batch ends). A batch normally takes one round
	// trip and a commit, a few milliseconds; under load batches start far
	// more often than this, so the rule does not shrink them.
	stallAfter = 20 * time.Millisecond
)

// Option tunes a Store at Open.
type Option func(*Store)

// WithBatchGather makes the write group hold its queued callers, up to wait
// after the oldest of them arrived, until ops of them are queued, before it
// starts their batch, also when no batch runs: a test or simulation knob,
// which production never needs (batches grow by themselves under load, see
// Group commit). It lets calls issued together share one transaction
// however quickly a batch would have started for the first, so the batched
// path (several members in one transaction, a refused member run again
// alone, admissions and settles of different resources together) is
// reached on purpose. It changes no guarantee: a member is still answered
// only after its batch's COMMIT was acknowledged, and the key rules hold.
// The wait is bounded: it ends when ops callers are queued or wait has
// passed, whichever comes first. A wait below 1 ns or ops below 2 leaves the
// store as without it.
func WithBatchGather(wait time.Duration, ops int) Option {
	return func(s *Store) {
		if wait > 0 && ops > 1 {
			s.writes.gatherFor, s.writes.gatherOps = wait, min(ops, maxBatch)
		}
	}
}

// WithLogger makes the store report a write batch that panicked (a bug: its
// callers are answered INTERNAL, see runGuarded) to log, the process's
// logger, with the panic's stack; without it, to slog.Default.
func WithLogger(log *slog.Logger) Option {
	return func(s *Store) { s.writes.log = log }
}

// member is one call waiting in a group.
type member[T any] struct {
	ctx  context.Context
	req  T
	keys []string // resources, targets and settled receipts it touches; one per batch
	done chan struct{}
	err  error
	// queued is when it was queued (for WithBatchGather).
	queued time.Time
	// taken is set once a batch owns the member.
	taken atomic.Bool
}

// group gathers members and runs them in batches with run. run must set
// every member's result (err and whatever T carries) and must not keep them;
// a panic in it answers every member of its batch INTERNAL (runGuarded).
type group[T any] struct {
	run   func(ctx context.Context, ms []*member[T])
	slots int // batches that may run at once; 0 means defaultSlots
	// log reports a batch that panicked (WithLogger; nil: slog.Default).
	log *slog.Logger

	// batches and members count the transactions that committed and the
	// members they carried (runBatch reports them; a batch run again on the
	// locked path counts once, one run member by member once per member
	// that committed, a failed or uncertain one not at all).
	batches, members atomic.Uint64

	// now and afterFunc are the clock and timer (nil: time.Now and
	// time.AfterFunc; tests inject).
	now       func() time.Time
	afterFunc func(time.Duration, func())

	mu        sync.Mutex
	queue     []*member[T]
	inflight  int
	running   int             // members of the running batches
	busy      map[string]bool // keys of the running batches
	lastStart time.Time       // when the last batch started
	armed     bool            // a stall timer will kick

	// gatherFor and gatherOps are WithBatchGather's (0: off); gatherArmed,
	// that its timer will kick.
	gatherFor   time.Duration
	gatherOps   int
	gatherArmed bool
}

func (g *group[T]) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// do queues req and waits for its batch. It returns ctx's error if ctx ends
// first: before a batch took the member, nothing of it runs; after, the
// batch may still commit it (other members' contexts keep it going), so the
// error wraps errAbandoned and the caller must treat it like a lost answer
// and not read the member, which the batch still writes.
func (g *group[T]) do(ctx context.Context, req T, keys ...string) (*member[T], error) {
	m := &member[T]{ctx: ctx, req: req, keys: keys, done: make(chan struct{})}
	g.mu.Lock()
	if g.gatherFor > 0 { // only WithBatchGather reads it
		m.queued = g.clock()
	}
	g.queue = append(g.queue, m)
	g.kick()
	g.mu.Unlock()
	select {
	case <-m.done:
		return m, m.err
	case <-ctx.Done():
		if m.taken.CompareAndSwap(false, true) {
			// Never ran: drop it from the queue.
			g.mu.Lock()
			for i, q := range g.queue {
				if q == m {
					g.queue = append(g.queue[:i:i], g.queue[i+1:]...)
					break
				}
			}
			g.mu.Unlock()
			return m, ctx.Err()
		}
		select {
		case <-m.done: // the batch ended meanwhile: its answer stands
			return m, m.err
		default:
		}
		// A running batch owns it and runs on while any member's context
		// lives: the caller's deadline bounds its wait, not the batch.
		return nil, fmt.Errorf("%w: %w", errAbandoned, ctx.Err())
	}
}

// errAbandoned marks do's answer to a caller whose context ended while a
// batch held its call: the call's write may still commit.
var errAbandoned = errors.New("fence store: the call's batch is still running; its write may yet commit")

// kick starts batches while a slot is free and queued members can go. g.mu
// is held.
func (g *group[T]) kick() {
	slots := g.slots
	if slots < 1 {
		slots = defaultSlots
	}
	// Beside running batches a new one starts only once as many callers
	// wait as those batches carry, so under load batches grow rather than
	// multiply (fewer commits), while a lone or light caller never waits;
	// or once they look stalled (none started for stallAfter).
	now := g.clock()
	if g.gatherFor > 0 && len(g.queue) > 0 && len(g.queue) < g.gatherOps {
		// WithBatchGather: wait for company while the oldest caller may.
		if wait := g.queue[0].queued.Add(g.gatherFor).Sub(now); wait > 0 {
			if !g.gatherArmed {
				g.gatherArmed = true
				g.after(wait, func() {
					g.mu.Lock()
					g.gatherArmed = false
					g.kick()
					g.mu.Unlock()
				})
			}
			return
		}
	}
	stalled := !g.lastStart.IsZero() && now.Sub(g.lastStart) >= stallAfter
	for g.inflight < slots && len(g.queue) > 0 && (g.inflight == 0 || len(g.queue) >= g.running || stalled) {
		var (
			batch []*member[T]
			rest  []*member[T]
			seen  = map[string]bool{}
		)
		for _, m := range g.queue {
			if m.taken.Load() {
				continue // its caller gave up
			}
			if len(batch) == maxBatch || clash(seen, m.keys) || clash(g.busy, m.keys) {
				rest = append(rest, m)
				continue
			}
			if !m.taken.CompareAndSwap(false, true) {
				continue
			}
			for _, k := range m.keys {
				seen[k] = true
			}
			batch = append(batch, m)
		}
		g.queue = rest
		if len(batch) == 0 {
			return
		}
		if g.busy == nil {
			g.busy = map[string]bool{}
		}
		for k := range seen {
			g.busy[k] = true
		}
		g.inflight++
		g.running += len(batch)
		g.lastStart = now
		stalled = false
		go g.exec(batch)
	}
	g.armStall(slots, now)
}

// armStall sets a timer to kick again stallAfter after the last batch
// started (now is kick's clock reading), when callers wait beside running
// batches with a slot free (so that stalled batches do not hold them up).
// g.mu is held.
func (g *group[T]) armStall(slots int, now time.Time) {
	if g.armed || g.inflight == 0 || g.inflight >= slots || len(g.queue) == 0 || g.lastStart.IsZero() {
		return
	}
	g.armed = true
	g.after(max(g.lastStart.Add(stallAfter).Sub(now), 0), func() {
		g.mu.Lock()
		g.armed = false
		g.kick()
		g.mu.Unlock()
	})
}

// after runs f after d (g.afterFunc, or time.AfterFunc).
func (g *group[T]) after(d time.Duration, f func()) {
	if g.afterFunc != nil {
		g.afterFunc(d, f)
		return
	}
	time.AfterFunc(d, f)
}

func clash(seen map[string]bool, keys []string) bool {
	for _, k := range keys {
		if seen[k] {
			return true
		}
	}
	return false
}

// exec runs one batch under a context that ends when every member's has.
func (g *group[T]) exec(batch []*member[T]) {
	ctx, cancel := context.WithCancel(context.Background())
	live := int32(len(batch))
	stops := make([]func() bool, 0, len(batch))
	for _, m := range batch {
		stops = append(stops, context.AfterFunc(m.ctx, func() {
			if atomic.AddInt32(&live, -1) == 0 {
				cancel()
			}
		}))
	}
	g.runGuarded(ctx, batch)
	for _, stop := range stops {
		stop()
	}
	cancel()
	for _, m := range batch {
		close(m.done)
	}
	g.mu.Lock()
	for _, m := range batch {
		for _, k := range m.keys {
			delete(g.busy, k)
		}
	}
	g.inflight--
	g.running -= len(batch)
	g.kick()
	g.mu.Unlock()
}

// runGuarded runs batch with g.run, so that a panic in it (a bug) does not
// end the process: it is logged once with its stack and every member is
// answered INTERNAL (batchPanicked), a fault without a verdict whatever run
// had set, and exec then answers the callers and frees the batch's keys and
// slot as after any batch, so later batches run as before. A panic while a
// transaction runs is caught nearer, by writeBatch, which also closes its
// connection; this one catches the rest (runBatch's own steps, say).
func (g *group[T]) runGuarded(ctx context.Context, batch []*member[T]) {
	defer func() {
		if p := recover(); p != nil {
			err := batchPanicked(g.log, "write", len(batch), p)
			for _, m := range batch {
				m.err = err
			}
		}
	}()
	g.run(ctx, batch)
}

// batchPanicked logs panic p of a batch of n members doing op to log
// (slog.Default when nil), with the stack (call it from the deferred
// function that recovered p), and returns the error its members get:
// INTERNAL, which the gateway takes for a fault that leaves the outcome open
// (like a lost COMMIT answer), never for a ruling, so it reads the receipt
// back before answering an admission and keeps a settle to retry.
func batchPanicked(log *slog.Logger, op string, n int, p any) error {
	if log == nil {
		log = slog.Default()
	}
	log.Error("fence store: a write batch panicked; its callers are answered INTERNAL",
		"op", op, "members", n, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
	return fencegate.Wrap(fmt.Errorf("panic: %v", p), fencegate.CodeInternal,
		"fence store: "+op+": the batch failed (a panic); whether it committed is not known")
}

// runBatch runs ms as one transaction with batch, first on the fast path
// (locked false: decided on what this process knows, one round trip). When
// that transaction was rolled back because what it was decided on changed
// (errFastMiss), the members' known state is dropped and the batch runs
// again on the locked path, which decides from what it reads. When a locked
// transaction fails and was certainly rolled back (the server refused a
// statement, or COMMIT was never sent), each member is run again alone, so
// that one member's failure fails only that member. When the COMMIT's answer
// was lost, or the transaction panicked (uncertain, writeBatch), every member
// gets the error: its write may or may not be durable, as for a lone
// transaction. Nothing is applied twice: a member is run again only after a
// certain rollback, and its result is set only once its transaction
// committed. It returns the transactions that committed and the members
// they carried.
func runBatch[T any](ctx context.Context, ms []*member[T], batch func(ctx context.Context, ms []*member[T], locked bool) (uncertain bool, err error), forget func([]*member[T])) (commits, members int) {
	uncertain, err := batch(ctx, ms, false)
	if err != nil && isFastMiss(err) {
		forget(ms)
		uncertain, err = batch(ctx, ms, true)
	}
	if err == nil {
		return 1, len(ms)
	}
	forget(ms)
	if len(ms) == 1 || uncertain {
		for _, m := range ms {
			m.err = err
		}
		return 0, 0
	}
	for i, m := range ms {
		if _, err := batch(ctx, ms[i:i+1:i+1], true); err != nil {
			forget(ms[i : i+1 : i+1])
			m.err = err
			continue
		}
		commits++
	}
	return commits, commits
}
