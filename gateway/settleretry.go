package gateway

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
)

// settleRetry records outcomes whose Settle failed because the fence store
// was unavailable: the effect was forwarded (or, for a failed admission, is
// known not to have been), so the outcome is known here and only the write of
// it is missing. Without this the receipt would stay PENDING until the
// reconciler takes it as orphaned (Reconciler.Orphan, minutes), and every
// retry of the segment would answer MUTATION_UNKNOWN although its effect was
// applied. A background goroutine retries each outcome promptly (20 ms,
// doubling to at most 1 s) until the store takes it or rules on it (the
// receipt settled elsewhere, or never admitted), and stops when nothing is
// left. Gateway.Drain records what is left at shutdown (bounded by its ctx);
// entries are lost if the process dies first: the reconciler settles those
// receipts after Orphan, as after a crash.
type settleRetry struct {
	ctx   context.Context // the gateway's Background
	store fencegate.FenceStore
	after func(time.Duration) <-chan time.Time
	spawn func(func())
	log   *slog.Logger

	mu      sync.Mutex
	queue   map[string]fencegate.Outcome
	running bool
	// pass is held through a pass over the queue, so that Drain's pass
	// (tryOnce) and the loop's never settle one outcome at the same time.
	pass sync.Mutex
}

// maxRetryQueue bounds the outcomes kept for retry; beyond it the reconciler
// settles the receipts (after Orphan).
const maxRetryQueue = 100_000

// settleTimeout bounds one Settle attempt (a var for tests).
var settleTimeout = 10 * time.Second

// settleOrQueue records out for receipt id, detached from ctx's
// cancellation and bounded by settleTimeout, as every settle of a write is:
// a store that stops answering holds nobody. When the store gives no ruling
// (down, timed out), out is counted as a store error and kept in the retry
// queue. It returns the store's answer.
func (g *Gateway) settleOrQueue(ctx context.Context, id string, out fencegate.Outcome) (fencegate.Receipt, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	r, err := g.cfg.Store.Settle(sctx, id, out)
	if err != nil && !isRuling(err) {
		g.cfg.Observe.StoreError("settle")
		g.retry.add(id, out)
	}
	return r, err
}

// storedReceipt reads receipt id as the store holds it, detached from ctx's
// cancellation and bounded by settleTimeout (after a settle the store
// refused, say).
func (g *Gateway) storedReceipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	return g.cfg.Store.Receipt(rctx, id)
}

const (
	retryMinDelay = 20 * time.Millisecond
	retryMaxDelay = time.Second
)

// add queues o for receipt id and starts the retry loop if it is not
// running. An outcome waiting for id is replaced, unless it is final and o
// is not.
func (q *settleRetry) add(id string, o fencegate.Outcome) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queue == nil {
		q.queue = map[string]fencegate.Outcome{}
	}
	if len(q.queue) >= maxRetryQueue {
		q.log.Error("settle retry queue full; the reconciler will settle the receipt", "receipt", id, "state", o.State)
		return
	}
	if cur, ok := q.queue[id]; ok && cur.State.Terminal() && !o.State.Terminal() {
		// A final outcome already waiting (a reader's proof of COMMITTED,
		// say) is not replaced by a later attempt's UNKNOWN: it is what
		// the store must record, and what a reader may have been told.
		return
	}
	q.queue[id] = o
	if !q.running {
		q.running = true
		q.spawn(q.run)
	}
}

// len is the number of outcomes waiting.
func (q *settleRetry) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}

// tryOnce settles each waiting outcome once, in a stable order, until the
// store fails one without a verdict (the rest would fail alike); it reports
// how many are still waiting. Drain calls it beside the loop; while the
// loop's own pass runs it settles nothing (pass), so no outcome is sent
// twice at once, and Drain looks again after its wait.
func (q *settleRetry) tryOnce(ctx context.Context) int {
	if q.pass.TryLock() {
		q.settleOnce(ctx)
		q.pass.Unlock()
	}
	return q.len()
}

// settleOnce is one pass over the waiting outcomes (tryOnce's, and each of
// run's): it reports whether the store took or ruled on any. The caller
// holds q.pass.
func (q *settleRetry) settleOnce(base context.Context) (progress bool) {
	q.mu.Lock()
	batch := maps.Clone(q.queue)
	q.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(batch)) { // in a stable order
		o := batch[id]
		ctx, cancel := context.WithTimeout(base, settleTimeout)
		r, err := q.store.Settle(ctx, id, o)
		cancel()
		if err != nil && !isRuling(err) {
			// The store is still down: the rest of the batch would
			// fail alike.
			break
		}
		progress = true
		q.mu.Lock()
		if cur, ok := q.queue[id]; ok && cur == o {
			delete(q.queue, id)
		}
		q.mu.Unlock()
		if err != nil {
			// RECEIPT_SETTLED: another replica's resend (or an operator)
			// settled it meanwhile; its final state stands.
			q.log.Info("settle retry: the store ruled; dropped", "receipt", id, "err", err)
		} else {
			q.log.Info("settle retried: receipt recorded", "receipt", id, "state", r.State)
		}
	}
	return progress
}

func (q *settleRetry) run() {
	base := q.ctx
	if base == nil {
		base = context.Background()
	}
	var wait backoff
	for {
		q.mu.Lock()
		// Nothing left, or the gateway's Background ended (closing: the
		// queue is left to the reconciler, as after a crash).
		if len(q.queue) == 0 || base.Err() != nil {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()

		q.pass.Lock()
		progress := q.settleOnce(base)
		q.pass.Unlock()
		if progress {
			wait.reset()
			if q.len() > 0 {
				continue // the store is back: go on with the rest at once
			}
		}
		q.mu.Lock()
		if len(q.queue) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		wait.wait(q.after)
	}
}

// backoff paces the tries of a settle that failed without a verdict (the
// retry queue's and a deferred entry's flusher): retryMinDelay, doubling to
// retryMaxDelay; reset after progress.
type backoff struct{ delay time.Duration }

// wait waits out the next delay through after.
func (b *backoff) wait(after func(time.Duration) <-chan time.Time) {
	if b.delay == 0 {
		b.delay = retryMinDelay
	}
	<-after(b.delay)
	b.delay = min(2*b.delay, retryMaxDelay)
}

func (b *backoff) reset() { b.delay = 0 }
