package gateway

import (
	"context"
	"log/slog"

	"github.com/fencegate/fencegate"
)

// replay answers a replayed segment from its original receipt. An UNKNOWN
// receipt is first given to the target's Resolver (an API resends the kept
// request under the same key where its contract allows it); what that
// settles is recorded and answered, so a worker that retries after
// MUTATION_UNKNOWN gets the settled answer. The caller holds the resource.
func (g *Gateway) replay(ctx context.Context, r fencegate.Receipt) (Result, error) {
	if p, ok := g.proveNow(ctx, r); ok { // another replica's deferred settle
		r = p
	}
	if r.State == fencegate.ReceiptUnknown && g.cfg.Resolver != nil {
		if res := g.cfg.Resolver(r.Target); res != nil {
			r = g.resolveNow(ctx, res, r)
		}
	}
	switch r.State {
	case fencegate.ReceiptPending, fencegate.ReceiptUnknown:
		fe := &fencegate.Error{Code: fencegate.CodeMutationUnknown, Message: "the original effect has not settled yet", ReceiptID: r.ID}
		if r.State == fencegate.ReceiptUnknown && r.RetryAt != nil {
			fe.RetryAfter = r.RetryAt.Sub(g.cfg.Now()) // the upstream's own wait, on every replica
		}
		return Result{Receipt: r, Replay: true}, fe
	case fencegate.ReceiptNotApplied, fencegate.ReceiptFailed:
		return Result{Receipt: r, Replay: true}, &fencegate.Error{Code: fencegate.CodeBackendUnavailable,
			Message: "the original effect was not applied; send the segment again", ReceiptID: r.ID}
	}
	return Result{Receipt: r, Replay: true}, nil
}

// resolveNow runs res on r and records what it learnt; it returns the
// receipt as stored afterwards (r itself when nothing was recorded).
func (g *Gateway) resolveNow(ctx context.Context, res Resolver, r fencegate.Receipt) fencegate.Receipt {
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.EffectTimeout)
	defer cancel()
	claimed, ok := claimResend(ectx, g.cfg.Store, res, r, g.cfg.Now())
	if !ok {
		if cur, rerr := g.cfg.Store.Receipt(context.WithoutCancel(ctx), r.ID); rerr == nil {
			return cur // settled meanwhile (an operator's verdict): nothing is sent
		}
		return r
	}
	r = claimed
	out, err := resolve(ectx, g.cfg.Log, res, r)
	if err != nil {
		g.cfg.Log.WarnContext(ctx, "replay: settling the unknown outcome failed", "receipt", r.ID, "err", err)
		return r
	}
	if !Learnt(r, out) {
		return r
	}
	out.Now = g.cfg.Now()
	// What the resend learnt goes to the retry queue if the store cannot
	// take it now (settleOrQueue), as forward's outcome does: dropped, the
	// receipt would wait for the claim's window and cost another attempt.
	settled, err := g.settleOrQueue(ctx, r.ID, out)
	if err != nil {
		g.cfg.Log.WarnContext(ctx, "replay: recording the settled outcome failed", "receipt", r.ID, "err", err)
		if cur, rerr := g.storedReceipt(ctx, r.ID); rerr == nil {
			return cur // settled meanwhile by the reconciler
		}
		return r
	}
	return settled
}

// resolve runs res on r as the reconciler and a replay do, recovering a
// panic as applyEffect does for an effect: whatever the resolver sent before
// it panicked is not known, so the outcome is UNKNOWN with no resend allowed
// and an error, which the caller records as it records any failed query.
// Unrecovered, a panic in the reconciler's pass ends the process, and again
// at every restart while the receipt is there.
func resolve(ctx context.Context, log *slog.Logger, res Resolver, r fencegate.Receipt) (out fencegate.Outcome, err error) {
	defer unknownOnPanic(ctx, log, "settling the outcome", r.ID, &out, &err)
	return res.Resolve(ctx, r)
}

// Learnt reports whether a resolver's outcome for r is worth recording: a
// new state, or, still UNKNOWN, another attempt or a changed resend mark or
// reason.
func Learnt(r fencegate.Receipt, out fencegate.Outcome) bool {
	if out.State == "" {
		return false
	}
	if out.State != fencegate.ReceiptUnknown || r.State != fencegate.ReceiptUnknown {
		return true
	}
	return out.Attempts > 0 || out.Resend != r.Resend || (out.Error != "" && out.Error != r.Error)
}
