package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore"
)

// The deferred settle (docs/deferred-settle.md). An object PUT whose effect
// returned COMMITTED, and whose object names its receipt (SelfProving), is
// answered as soon as the effect is durable at the object store, with the
// receipt exactly as the store will settle it (fencestore.SettledReceipt). The
// settle itself is kept here, one entry per resource, until it is durable:
// folded into the next admission on the resource in this process
// (AdmitRequest.Prior, when the store is PriorSettling), or flushed through
// Store.Settle after Config.DeferSettle. Until then the store's pending mark
// keeps every other replica off the resource, and after a crash the object's
// metadata proves the receipt COMMITTED (Prover): the reconciler, a busy
// admission elsewhere and every receipt read settle it so.
//
// The rule this file keeps: this process sends no admission on a resource
// while its deferred settle of it is not durable, except the admission that
// carries it as its Prior. An entry is therefore never dropped: a settle or
// fold that fails without a verdict puts it back (idle) and its flusher
// tries again (20 ms doubling to 1 s), and an Apply that finds it idle takes
// it over; one that finds it being settled waits for that (a channel).

// SelfProving is implemented by an Effect whose write names its receipt in
// the object's own metadata (ObjectPut): once it returned COMMITTED, the
// object proves it, so its settle may be deferred.
type SelfProving interface {
	ProvesItself() bool
}

// ProvesItself reports true: the object carries EffectMetaOf(r).
func (ObjectPut) ProvesItself() bool { return true }

// Entry states.
const (
	deferIdle = iota // nobody settles it now: a fold or the flusher may claim it
	deferBusy        // claimed: a settle or a fold carrying it is in flight
	deferDone        // durable, or ruled on by the store
)

// deferredSettle is one answered, not yet durable settle.
type deferredSettle struct {
	id, resource string
	out          fencegate.Outcome
	at           time.Time // the answered SettledAt: a settle that recorded it is this entry's
	state        int
	change       chan struct{} // closed (and replaced) at every state change
}

// deferrals holds the entries, by resource and by receipt ID.
type deferrals struct {
	mu    sync.Mutex
	byRes map[string]*deferredSettle
	byID  map[string]*deferredSettle
	// observe is told the number of entries at every change (under mu, so
	// in order): Observer.Deferred.
	observe func(int)
	// off is true when the window is off (DeferSettle 0): no entry is ever
	// added, so the lookups of every write and read answer nil without
	// taking mu (the write path costs what it did without deferral).
	off bool
}

// add keeps e unless its resource still has an entry: one whose fold ended
// without a verdict on it (a store that broke the PriorSettling contract), so
// its fate is unknown and it must stay the resource's entry, to be folded or
// flushed again; then add reports false and e is settled synchronously.
func (d *deferrals) add(e *deferredSettle) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.byRes == nil {
		d.byRes, d.byID = map[string]*deferredSettle{}, map[string]*deferredSettle{}
	}
	if d.byRes[e.resource] != nil {
		return false
	}
	e.change = make(chan struct{})
	d.byRes[e.resource], d.byID[e.id] = e, e
	d.told()
	return true
}

// setLocked moves e to state and wakes its waiters; d.mu is held.
func (d *deferrals) setLocked(e *deferredSettle, state int) {
	e.state = state
	close(e.change)
	e.change = make(chan struct{})
	if state == deferDone {
		if d.byRes[e.resource] == e {
			delete(d.byRes, e.resource)
		}
		delete(d.byID, e.id)
		d.told()
	}
}

// told tells observe the number of entries; d.mu is held.
func (d *deferrals) told() {
	if d.observe != nil {
		d.observe(len(d.byID))
	}
}

// claim takes e if it is idle; else it returns e's state and the channel
// closed at its next change.
func (d *deferrals) claim(e *deferredSettle) (bool, int, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.state == deferIdle {
		d.setLocked(e, deferBusy)
		return true, deferBusy, nil
	}
	return false, e.state, e.change
}

// finish marks e durable (or ruled on) and forgets it.
func (d *deferrals) finish(e *deferredSettle) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.state != deferDone {
		d.setLocked(e, deferDone)
	}
}

// release gives e back (its settle failed without a verdict).
func (d *deferrals) release(e *deferredSettle) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.state == deferBusy {
		d.setLocked(e, deferIdle)
	}
}

// pending reports whether e is still an entry: answered, not yet durable
// nor ruled on.
func (d *deferrals) pending(e *deferredSettle) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return e.state != deferDone
}

func (d *deferrals) ofResource(res string) *deferredSettle {
	if d.off {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byRes[res]
}

func (d *deferrals) ofReceipt(id string) *deferredSettle {
	if d.off {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byID[id]
}

func (d *deferrals) all() []*deferredSettle {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*deferredSettle, 0, len(d.byID))
	for _, e := range d.byID {
		out = append(out, e)
	}
	return out
}

func (d *deferrals) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.byID)
}

// deferrable reports whether the settle of r's effect outcome out may be
// deferred: the window is on, r is an object PUT whose effect proves itself
// and whose target has a Prover (so a crash leaves a provable receipt), and
// the effect returned COMMITTED with a version. Everything else (API calls,
// deletes, UNKNOWN, FAILED, NOT_APPLIED) settles synchronously.
func (g *Gateway) deferrable(r fencegate.Receipt, eff Effect, out fencegate.Outcome) bool {
	if g.cfg.DeferSettle <= 0 || r.Method != "PUT" {
		return false
	}
	if out.State != fencegate.ReceiptCommitted || out.Version == "" {
		return false
	}
	if p, ok := eff.(SelfProving); !ok || !p.ProvesItself() {
		return false
	}
	return g.prover(r.Target) != nil
}

// deferSettle answers the COMMITTED outcome out of admitted receipt r now and
// keeps its settle until it is durable (see the file comment). ok is false
// when out cannot settle r (the store would refuse it), or the resource
// still has an entry of unknown fate (add): then the caller settles
// synchronously, as without deferral.
func (g *Gateway) deferSettle(r fencegate.Receipt, out fencegate.Outcome) (fencegate.Receipt, bool) {
	settled, err := fencestore.SettledReceipt(r, out)
	if err != nil {
		return r, false
	}
	e := &deferredSettle{id: r.ID, resource: r.Resource, out: out, at: *settled.SettledAt}
	if !g.deferred.add(e) {
		return r, false
	}
	g.cfg.Go(func() { g.flusher(e) })
	return settled, true
}

// flusher makes e durable through Store.Settle once the window has passed,
// unless a fold takes it first; it tries again after a failure without a
// verdict, until the store takes the settle or rules on it.
//
// It stops once the gateway's Background has ended (the process is closing:
// what Drain did not make durable is left to the objects' proofs, as after
// a crash), so no flusher outlives the store it writes to.
func (g *Gateway) flusher(e *deferredSettle) {
	<-g.cfg.After(g.cfg.DeferSettle)
	var wait backoff
	for g.cfg.Background.Err() == nil {
		ok, state, change := g.deferred.claim(e)
		switch {
		case state == deferDone:
			return
		case !ok:
			g.cfg.Block(change) // a fold carries it: see how it ends
			continue
		}
		if g.settleDeferred(g.cfg.Background, e) {
			return
		}
		wait.wait(g.cfg.After)
	}
}

// settleDeferred records the claimed entry e through Store.Settle, bounded
// by base (the gateway's Background, or Drain's ctx) and settleTimeout. It
// reports true when e is done (durable, or the store ruled: the receipt was
// settled meanwhile, e.g. proven by another replica); on a failure without a
// verdict e is released for the next try.
func (g *Gateway) settleDeferred(base context.Context, e *deferredSettle) bool {
	ctx, cancel := context.WithTimeout(base, settleTimeout)
	r, err := g.cfg.Store.Settle(ctx, e.id, e.out)
	cancel()
	if err != nil && !isRuling(err) {
		g.cfg.Observe.StoreError("settle")
		g.cfg.Log.Warn("deferred settle failed; trying again", "receipt", e.id, "err", err)
		g.deferred.release(e)
		return false
	}
	if err != nil {
		g.cfg.Log.Warn("deferred settle: the store ruled (settled meanwhile)", "receipt", e.id, "err", err)
	} else if e.recorded(r) {
		g.cfg.Observe.Settled(r.State)
	}
	g.deferred.finish(e)
	return true
}

// recorded reports whether r, as a settle of e answered it, is e's own
// record: not an idempotent repeat of a proof made meanwhile by a read, a
// busy admission or a reconciler, which counted it already.
func (e *deferredSettle) recorded(r fencegate.Receipt) bool {
	return r.SettledAt != nil && r.SettledAt.Equal(e.at)
}

// takeDeferred claims the resource's deferred entry for the next admission
// on it (the caller holds the resource's lock): nil when there is none. An
// entry being settled (its flush, or a fold by a request that gave up) is
// waited for, then looked at again.
func (g *Gateway) takeDeferred(res string) *deferredSettle {
	for {
		next := g.deferred.ofResource(res)
		if next == nil {
			return nil
		}
		ok, state, change := g.deferred.claim(next)
		if ok {
			return next
		}
		if state != deferDone {
			g.cfg.Block(change)
		}
	}
}

// priorDecided closes the fold of e after an admission verdict: the store
// settled the prior (Admission.Prior) or ruled on it (PriorErr). A verdict
// that says neither breaks the PriorSettling contract: the prior's fate is
// unknown, so e is released and stays the resource's entry (add refuses the
// next one), to be flushed by its flusher or folded into the next admission.
// The one verdict that need not answer the prior is the request's refusal
// as malformed (err INVALID_REQUEST, fencegate.PriorSettling): e is
// released, as after a fault; settling it again is idempotent if the store
// did apply it.
func (g *Gateway) priorDecided(e *deferredSettle, adm fencegate.Admission, err error) {
	switch {
	case adm.Prior != nil:
		if e.recorded(*adm.Prior) {
			g.cfg.Observe.Settled(adm.Prior.State)
		}
	case adm.PriorErr != nil:
		g.cfg.Log.Warn("deferred settle: the store ruled on the folded settle (settled meanwhile)", "receipt", e.id, "err", adm.PriorErr)
	case fencegate.ErrorCode(err) == fencegate.CodeInvalidRequest:
		g.cfg.Log.Warn("deferred settle: the admission carrying it was refused as malformed; trying it again", "receipt", e.id, "err", err)
		g.deferred.release(e)
		return
	default:
		g.cfg.Log.Error("fence store admitted without answering the folded settle; its fate is unknown, trying it again", "receipt", e.id)
		g.deferred.release(e)
		return
	}
	g.deferred.finish(e)
}

// flushResource makes the resource's deferred settle durable before a read
// of it (read your writes); it returns at once when there is none.
func (g *Gateway) flushResource(res string) {
	if e := g.deferred.ofResource(res); e != nil {
		g.flushEntry(e)
	}
}

// flushEntry settles e now, or waits for whoever settles it, until it is
// done; after a few tries that failed without a verdict the read goes on
// (the store answers PENDING and the read proves the object instead).
func (g *Gateway) flushEntry(e *deferredSettle) {
	for range 3 {
		ok, state, change := g.deferred.claim(e)
		switch {
		case state == deferDone:
			return
		case ok:
			if g.settleDeferred(g.cfg.Background, e) {
				return
			}
		default:
			g.cfg.Block(change)
		}
	}
}

// Drain makes every deferred settle durable now, and every settle queued
// for retry (settleRetry: an outcome known here whose Settle failed), since
// the process is stopping: call it after the HTTP server has shut down,
// before the store closes. It returns when none is left or ctx ends; what is
// left then is proven by the reconciler from the objects, or settled by it
// after Orphan, as after a crash.
func (g *Gateway) Drain(ctx context.Context) error {
	for {
		for _, e := range g.deferred.all() {
			if ctx.Err() != nil {
				break // what is left is proven from the objects, as after a crash
			}
			if ok, _, _ := g.deferred.claim(e); ok {
				g.settleDeferred(ctx, e)
			}
		}
		queued := g.retry.tryOnce(ctx)
		if g.deferred.len() == 0 && queued == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-g.cfg.After(retryMinDelay):
		}
	}
}

// DeferredSettles is the number of answered settles not yet durable.
func (g *Gateway) DeferredSettles() int { return g.deferred.len() }
