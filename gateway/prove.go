package gateway

import (
	"context"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore"
)

// Prover is the Resolver capability behind the deferred settle's recovery:
// Prove answers COMMITTED (ok) when r's effect proves itself applied now
// (the object's metadata names r), whatever r's age; ok false concludes
// nothing. Proof is proof: a PENDING receipt may be settled COMMITTED by it
// at once, while only Resolve, after the write's expiry and grace, may call a
// write NOT_APPLIED. ObjectResolver implements it.
type Prover interface {
	Prove(ctx context.Context, r fencegate.Receipt) (fencegate.Outcome, bool, error)
}

// Prove implements Prover for object PUTs: the object carrying r's ID is
// COMMITTED at its current version.
func (o ObjectResolver) Prove(ctx context.Context, r fencegate.Receipt) (fencegate.Outcome, bool, error) {
	name, key, ok := fencegate.SplitObjectTarget(r.Target)
	st := o.Stores[name]
	if !ok || st == nil || r.Method != "PUT" {
		return fencegate.Outcome{}, false, nil
	}
	info, err := st.Head(ctx, key)
	if err != nil {
		if fencegate.ErrorCode(err) == fencegate.CodeNotFound {
			err = nil
		}
		return fencegate.Outcome{}, false, err
	}
	if !namesReceipt(info, r.ID) {
		return fencegate.Outcome{}, false, nil
	}
	return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: info.ETag}, true, nil
}

// proveWait is how long an admission waits on another replica's PENDING
// object receipt before it asks the object whether the write landed: none.
// A live replica's deferred settle stays PENDING for up to its window (a
// lease's next segment through another replica would wait most of it, and
// polling first cost such a write about 70 ms at a 150 ms window), and a
// crashed one's forever; the object proves both at once. An effect still in
// flight costs one HEAD, then the admission polls as before.
const proveWait = 0

// proveAfter is the age from which the reconciler proves PENDING object
// receipts (well above a deferred settle's window, so that it rarely races
// the answering process's own settle; when it does, both record the same
// state and version, the proof with its own SettledAt).
const proveAfter = time.Second

// prover is the Prover of target's resolver, nil if none.
func (g *Gateway) prover(target string) Prover {
	if g.cfg.Resolver == nil {
		return nil
	}
	p, _ := g.cfg.Resolver(target).(Prover)
	return p
}

// proveNow settles the PENDING receipt r COMMITTED if its object proves it,
// and returns r as settled (ok). When the store cannot take the settle now
// the proven receipt is answered anyway (its settle retried in the
// background); when the store ruled (settled meanwhile) its state is read.
func (g *Gateway) proveNow(ctx context.Context, r fencegate.Receipt) (fencegate.Receipt, bool) {
	if r.State != fencegate.ReceiptPending {
		return r, false
	}
	p := g.prover(r.Target)
	if p == nil {
		return r, false
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.EffectTimeout)
	defer cancel()
	out, ok, err := p.Prove(pctx, r)
	if err != nil || !ok {
		return r, false
	}
	out.Now = g.cfg.Now()
	settled, err := g.cfg.Store.Settle(pctx, r.ID, out)
	switch {
	case err == nil:
		g.cfg.Observe.Settled(settled.State)
		g.cfg.Log.InfoContext(ctx, "pending receipt proven committed by its object", "receipt", r.ID)
		return settled, true
	case !isRuling(err):
		g.cfg.Observe.StoreError("settle")
		g.retry.add(r.ID, out)
		if s, serr := fencestore.SettledReceipt(r, out); serr == nil {
			return s, true
		}
		return r, false
	}
	cur, rerr := g.cfg.Store.Receipt(pctx, r.ID)
	return cur, rerr == nil
}

// proveYoung is the reconciler's prompt proof of a PENDING object receipt
// younger than Orphan: settled COMMITTED if its object names it, else left
// alone (its effect may still be in flight). It reports whether it settled.
func (rc *Reconciler) proveYoung(ctx context.Context, r fencegate.Receipt) bool {
	p, ok := rc.resolver(r.Target).(Prover)
	if !ok {
		return false
	}
	out, ok, err := p.Prove(ctx, r)
	if err != nil || !ok {
		return false
	}
	out.Now = rc.now()
	if _, err := rc.Store.Settle(ctx, r.ID, out); err != nil {
		if !isRuling(err) {
			rc.observe().StoreError("settle")
		}
		return false
	}
	rc.observe().Settled(out.State)
	rc.log().Info("reconciled: pending receipt proven committed by its object", "receipt", r.ID)
	return true
}
