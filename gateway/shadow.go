package gateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"

	"github.com/fencegate/fencegate"
)

// verdictCodes are the refusals shadow mode records and lets through. Caller
// authentication, the access policy, malformed requests and backend faults
// are never shadowed.
var verdictCodes = map[fencegate.Code]bool{
	fencegate.CodeGrantInvalid: true, fencegate.CodeStatusInvalid: true, fencegate.CodeEpochRevoked: true,
	fencegate.CodeOwnerMismatch: true, fencegate.CodeResourceMismatch: true, fencegate.CodePolicyStale: true,
	fencegate.CodeStaleOwner: true, fencegate.CodeSegmentOutOfOrder: true, fencegate.CodeFenceRegression: true,
	fencegate.CodeQuarantined: true,
}

func isVerdict(err error) bool { return verdictCodes[fencegate.ErrorCode(err)] }

func grantResource(vg *fencegate.VerifiedGrant) string {
	if vg == nil {
		return ""
	}
	return vg.Resource
}

// shadowForward records the verdict of a refused request on a shadow-mode
// resource and forwards it anyway, chained on the target's last version like
// any write; no fence state moves and no receipt is stored. vg is the
// verified grant, nil if the grant itself was refused; locked says the caller
// already holds the resource's lock.
func (g *Gateway) shadowForward(ctx context.Context, req Request, vg *fencegate.VerifiedGrant, verdict error, locked bool) (Result, error) {
	// Shadow mode relaxes fencing, never the access policy: a verdict met
	// before the policy was checked (a garbage grant, another owner's) must
	// not carry a caller past it.
	if g.cfg.Access != nil {
		if err := g.cfg.Access.CheckLease(req.Caller, req.Resource); err != nil {
			return Result{}, err
		}
	}
	code := fencegate.ErrorCode(verdict)
	g.cfg.Log.WarnContext(ctx, "shadow mode: forwarding a refused request", "resource", req.Resource, "target", req.Target,
		"verdict", code, "detail", fencegate.ErrorMessage(verdict))
	if g.cfg.Alarm != nil {
		rule, _ := g.cfg.Modes.Match(req.Resource)
		g.cfg.Alarm.ShadowVerdict(req.Resource, rule.Pattern, code)
	}
	if !locked {
		held, err := g.lockResource(ctx, req.Resource)
		if err != nil {
			return Result{}, err
		}
		defer held.unlock()
	}
	// Never alongside a fenced effect in flight on the same resource. This
	// process's own deferred settle is not one: it is made durable first.
	for _, res := range []string{req.Resource, grantResource(vg)} {
		g.flushResource(res)
		if rs, err := g.cfg.Store.Resource(ctx, res); err == nil && rs.PendingReceipt != "" {
			return Result{}, &fencegate.Error{Code: fencegate.CodeResourceBusy, Message: "another effect on the resource has not settled yet", ReceiptID: rs.PendingReceipt}
		}
	}
	prev, err := g.cfg.Store.Version(ctx, req.Target)
	if err != nil {
		return Result{}, err
	}
	// A retried shadow forward carries the same idempotency root, so an API
	// that dedupes by key applies it once.
	sum := sha256.Sum256([]byte(req.GrantToken + "\x00" + strconv.FormatUint(req.Segment, 10) + "\x00" + req.Target + "\x00" + req.PayloadDigest))
	root := "shadow:" + hex.EncodeToString(sum[:16])
	r := fencegate.Receipt{ID: NewID(shadowPrefix), Resource: req.Resource, Target: req.Target, Method: req.Method, Segment: req.Segment,
		PayloadDigest: req.PayloadDigest, OperationRoot: root, Owner: req.Caller, State: fencegate.ReceiptPending,
		CreatedAt: g.cfg.Now(), Error: "shadow mode forwarded a request refused with " + string(code)}
	if vg != nil {
		r.FenceToken, r.OperationID, r.Lease, r.GrantDigest = vg.FenceToken, vg.OperationID, vg.Lease, vg.Digest
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.EffectTimeout)
	defer cancel()
	ectx = fencegate.WithLandBy(ectx, EffectExpiry(r, g.cfg.EffectTimeout))
	effStart := g.cfg.Now()
	out, effErr := req.Effect.Apply(ectx, r, prev)
	g.cfg.Observe.Effect(BackendOf(req.Target), cmp.Or(out.State, fencegate.ReceiptUnknown), fencegate.ErrorCode(effErr), g.cfg.Now().Sub(effStart))
	out = g.adoptShadowVersion(ctx, req.Target, prev, out, effErr)
	if out.State == fencegate.ReceiptCommitted {
		if err := g.cfg.Store.SwapVersion(context.WithoutCancel(ctx), req.Target, prev, out.Version); err != nil {
			g.cfg.Log.ErrorContext(ctx, "shadow mode: could not record the forwarded version", "target", req.Target, "err", err)
		}
	}
	if out.State == "" {
		out.State = fencegate.ReceiptUnknown
	}
	r.State, r.Version, r.Response = out.State, out.Version, out.Response
	return Result{Receipt: r, Verdict: code}, effErr
}

// shadowPrefix begins the IDs of shadow forwards' (unstored) receipts.
const shadowPrefix = "shadow_"

// adoptShadowVersion records, for a write that failed its condition on an
// object a shadow-mode forward wrote (errShadowWritten), that object's
// version as target's, replacing prev, so that the next write of the key
// chains on it; the outcome it returns no longer carries the version (a
// FAILED receipt records none). Other outcomes pass through.
func (g *Gateway) adoptShadowVersion(ctx context.Context, target, prev string, out fencegate.Outcome, effErr error) fencegate.Outcome {
	if !errors.Is(effErr, errShadowWritten) || out.Version == "" {
		return out
	}
	if err := g.cfg.Store.SwapVersion(context.WithoutCancel(ctx), target, prev, out.Version); err != nil {
		g.cfg.Log.ErrorContext(ctx, "could not record the version a shadow-mode forward wrote", "target", target, "err", err)
	} else {
		g.cfg.Log.WarnContext(ctx, "recorded the version a shadow-mode forward wrote without an answer", "target", target, "version", out.Version)
	}
	out.Version = ""
	return out
}
