package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
)

// isRuling reports whether err is the store's verdict on the request (a fence
// rule), rather than a fault that leaves the outcome of the transaction open.
func isRuling(err error) bool {
	switch fencegate.ErrorCode(err) {
	case fencegate.CodeInternal, fencegate.CodeBackendUnavailable:
		return false
	}
	return true
}

// recoverAdmission settles an admission whose transaction failed without a
// verdict (its commit acknowledgement may have been lost): the receipt ID is
// ours, so the receipt's presence tells whether it committed. A committed
// admission goes on to its effect. NOT_FOUND under our own receipt ID means
// nothing was admitted (and a replay writes nothing in any case), so again is
// true: the admission may be tried once more, and a replay then gets the
// original receipt instead of the store's fault.
func (g *Gateway) recoverAdmission(ctx context.Context, req fencegate.AdmitRequest, cause error) (adm fencegate.Admission, again bool, err error) {
	r, err := g.cfg.Store.Receipt(ctx, req.ReceiptID)
	switch {
	case err == nil && !admittedBy(r, req):
		// Another admission's receipt under the same ID (IDs are random
		// within a millisecond): ours was not admitted under it, and that
		// receipt is not ours to go on with or to settle NOT_APPLIED.
		return fencegate.Admission{}, false, &fencegate.Error{Code: fencegate.CodeBackendUnavailable,
			Message: "the fence store failed; nothing was admitted or forwarded", Err: fmt.Errorf("%w: %w", errForeignID, cause)}
	case err == nil && r.State == fencegate.ReceiptPending:
		prev, verr := g.cfg.Store.Version(ctx, req.Target)
		if verr != nil {
			g.notApplied(req.ReceiptID)
			return fencegate.Admission{}, false, &fencegate.Error{Code: fencegate.CodeBackendUnavailable,
				Message: "the admission committed but the store cannot be read; nothing was forwarded", ReceiptID: r.ID, Err: verr}
		}
		g.cfg.Log.WarnContext(ctx, "admission committed despite an error; going on", "receipt", r.ID, "err", cause)
		return fencegate.Admission{Receipt: r, PreviousVersion: prev}, false, nil
	case fencegate.ErrorCode(err) == fencegate.CodeNotFound:
		return fencegate.Admission{}, true, cause
	}
	// Unknown whether it was admitted; nothing was forwarded, and nothing
	// will be: the receipt ID is this request's alone. If the receipt was
	// written it is settled NOT_APPLIED (its segment free again) as soon as
	// the store is back; if not, the store answers NOT_FOUND and that is all.
	g.notApplied(req.ReceiptID)
	return fencegate.Admission{}, false, &fencegate.Error{Code: fencegate.CodeBackendUnavailable,
		Message: "the fence store failed; nothing was forwarded", ReceiptID: req.ReceiptID, Err: cause}
}

// errForeignID marks a recovery that found another admission's receipt
// under this request's receipt ID: that receipt is not this request's to
// settle.
var errForeignID = errors.New("another admission's receipt has this request's receipt ID")

// admittedBy reports whether receipt r is the one req admits: the store's
// receipt IDs are unique, so a receipt of another resource, fence, segment,
// target or payload under req's ID is another request's.
func admittedBy(r fencegate.Receipt, req fencegate.AdmitRequest) bool {
	return r.Resource == req.Grant.Resource && r.FenceToken == req.Grant.FenceToken && r.Segment == req.Segment &&
		r.Target == req.Target && r.PayloadDigest == req.PayloadDigest
}

// admitAgain is how many more times an admission that certainly admitted
// nothing (recoverAdmission's again) is tried before BACKEND_UNAVAILABLE.
const admitAgain = 2

// notApplied queues NOT_APPLIED for a receipt this gateway may have admitted
// but whose effect it did not forward and never will: only while the
// receipt is still as admitted (IfPending), since another replica may have
// taken it for an orphan and resent it before the store takes this.
func (g *Gateway) notApplied(receiptID string) {
	g.retry.add(receiptID, fencegate.Outcome{State: fencegate.ReceiptNotApplied, IfPending: true,
		Error: "the fence store failed during admission; nothing was forwarded", Now: g.cfg.Now()})
}

// busyWait bounds how long an admission waits for another replica's effect
// on the resource to settle before answering RESOURCE_BUSY.
const busyWait = 5 * time.Second

// reauthorizeAfter is how long an authorization is taken to hold for
// admission; a request that waited longer is authorized again.
const reauthorizeAfter = 10 * time.Millisecond

// admit runs the store's admission. While another effect on the resource is
// PENDING (in flight at another replica) it waits, polling, up to busyWait:
// a higher fence's first effect waits for the lower one to settle. An UNKNOWN
// one is answered at once: it waits for the reconciler, not for a request.
// recheck runs before every attempt: a lease that expired (or was revoked)
// while the request waited is refused, not admitted on an old verdict; when
// it authorized again it returns when, and the attempt is made as of then.
func (g *Gateway) admit(ctx context.Context, req fencegate.AdmitRequest, recheck func() (time.Time, error), prior *deferredSettle) (res fencegate.Admission, rerr error) {
	var waited time.Duration
	tries := 0
	proved := "" // the busy receipt already asked about
	defer func() {
		if prior != nil { // its fold ended without a verdict: flushed instead
			g.deferred.release(prior)
		}
		if tries > 0 && (rerr != nil || res.Receipt.ID != req.ReceiptID) && !errors.Is(rerr, errForeignID) {
			// An attempt ended without a verdict, and this request goes
			// on without its own receipt (a refusal, a recheck that
			// failed, another request's replay): that attempt's commit
			// may become visible late, and nothing will be forwarded
			// for it, so it is settled NOT_APPLIED (NOT_FOUND if there
			// is none) rather than left to keep the resource busy.
			g.notApplied(req.ReceiptID)
		}
	}()
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 200*time.Millisecond) {
		at, err := recheck()
		if err != nil {
			return fencegate.Admission{}, err
		}
		if !at.IsZero() {
			req.Now = at
		}
		adm, err := g.cfg.Store.Admit(ctx, req)
		if err == nil && adm.Replay && tries > 0 && adm.Receipt.ID == req.ReceiptID && adm.Receipt.State == fencegate.ReceiptPending {
			// Our own earlier attempt, which seemed to admit nothing (its
			// receipt not yet visible: a commit acknowledged late), did
			// commit: the receipt ID is this request's alone and nothing
			// was forwarded for it, so it goes on as admitted.
			adm.Replay = false
		}
		if prior != nil && (err == nil || isRuling(err)) {
			g.priorDecided(prior, adm, err)
			prior, req.Prior = nil, nil
		}
		if err != nil && !isRuling(err) {
			g.cfg.Observe.StoreError("admit")
			adm, again, err := g.recoverAdmission(ctx, req, err)
			if prior != nil && err == nil {
				// The admission committed, and the prior in its transaction.
				g.deferred.finish(prior)
				prior = nil
			}
			if !again {
				return adm, err
			}
			if tries++; tries > admitAgain || ctx.Err() != nil {
				// Nothing was seen admitted: no receipt to name, a store
				// fault to retry (the deferred NOT_APPLIED above covers a
				// commit that becomes visible late).
				return fencegate.Admission{}, &fencegate.Error{Code: fencegate.CodeBackendUnavailable,
					Message: "the fence store failed; nothing was admitted or forwarded", Err: err}
			}
			g.cfg.Log.WarnContext(ctx, "admission failed without a verdict and admitted nothing; trying again", "receipt", req.ReceiptID, "err", err)
			continue
		}
		if fencegate.ErrorCode(err) != fencegate.CodeResourceBusy || waited >= busyWait {
			return adm, err
		}
		var fe *fencegate.Error // declared past the common exits: errors.As puts it on the heap
		if !errors.As(err, &fe) {
			return adm, err
		}
		r, rerr := g.cfg.Store.Receipt(ctx, fe.ReceiptID)
		if rerr != nil || r.State == fencegate.ReceiptUnknown {
			return adm, err // an UNKNOWN waits for the reconciler, not for this caller
		}
		// A receipt settled since the refusal leaves the resource free: the
		// next try (after the same bounded wait) is admitted.
		if r.State == fencegate.ReceiptPending && waited >= proveWait && proved != r.ID {
			// Still PENDING: a deferred settle whose process crashed is
			// proven by its object at once, instead of after Orphan.
			proved = r.ID
			if _, ok := g.proveNow(ctx, r); ok {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return adm, err
		case <-g.cfg.After(delay):
		}
		waited += delay
	}
}
