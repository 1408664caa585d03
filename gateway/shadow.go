package gateway

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"

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

// ShadowsRefusal reports whether err, a precheck's refusal of a write to
// resource before its body is read, is left to Apply, which records it and
// forwards the write anyway: resource is in shadow mode and err is a verdict
// (verdictCodes). Any other refusal is answered at once in either mode.
func (g *Gateway) ShadowsRefusal(resource string, err error) bool {
	return isVerdict(err) && g.cfg.Modes.For(resource) == Shadow
}

func grantResource(vg *fencegate.VerifiedGrant) string {
	if vg == nil {
		return ""
	}
	return vg.Resource
}

// shadowVerdict logs and counts (Alarm.ShadowVerdict) the verdict shadow
// mode met on req, under msg.
func (g *Gateway) shadowVerdict(ctx context.Context, req Request, verdict error, msg string) {
	code := fencegate.ErrorCode(verdict)
	g.cfg.Log.WarnContext(ctx, msg, "resource", req.Resource, "target", req.Target,
		"verdict", code, "detail", fencegate.ErrorMessage(verdict))
	if g.cfg.Alarm != nil {
		rule, _ := g.cfg.Modes.Match(req.Resource)
		g.cfg.Alarm.ShadowVerdict(req.Resource, rule.Pattern, code)
	}
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
	if !locked {
		held, err := g.lockResource(ctx, req.Resource)
		if err != nil {
			return Result{}, err
		}
		defer held.unlock()
	}
	code := fencegate.ErrorCode(verdict)
	// Never alongside a fenced effect in flight on the same resource, nor on
	// the resource the target is bound to (a fenced write under a grant for
	// a covering resource, local/inv for local/inv/7, marks that one, and
	// the refused request's own grant may be garbage). This process's own
	// deferred settle is not one: it is made durable first.
	var bound string
	if tb, ok := g.cfg.Store.(fencegate.TargetBindings); ok {
		var err error
		if bound, err = tb.Binding(ctx, req.Target); err != nil && fencegate.ErrorCode(err) != fencegate.CodeNotFound {
			return Result{}, err
		}
	}
	for _, res := range []string{req.Resource, grantResource(vg), bound} {
		if res == "" {
			continue
		}
		g.flushResource(res)
		if rs, err := g.cfg.Store.Resource(ctx, res); err == nil && rs.PendingReceipt != "" {
			// Not forwarded, but the verdict is what shadow mode is there to
			// show, in exactly this contention: recorded all the same.
			g.shadowVerdict(ctx, req, verdict, "shadow mode: a refused request not forwarded, an effect in flight on the resource")
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
	r := fencegate.Receipt{ID: NewID(fencegate.ShadowReceiptPrefix), Resource: req.Resource, Target: req.Target, Method: req.Method, Segment: req.Segment,
		PayloadDigest: req.PayloadDigest, OperationRoot: root, Owner: req.Caller, State: fencegate.ReceiptPending,
		CreatedAt: g.cfg.Now(), Error: "shadow mode forwarded a request refused with " + string(code)}
	if vg != nil {
		r.FenceToken, r.OperationID, r.Lease, r.GrantDigest = vg.FenceToken, vg.OperationID, vg.Lease, vg.Digest
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.EffectTimeout)
	defer cancel()
	ectx = fencegate.WithLandBy(ectx, EffectExpiry(r, g.cfg.EffectTimeout))
	// Decided here, held for the effect alone (bounded by effectTimeout): a
	// switch to enforce waits for it, and one made before it refuses it.
	release, ok := g.cfg.Modes.HoldShadow(req.Resource)
	if !ok {
		return Result{}, verdict
	}
	g.shadowVerdict(ctx, req, verdict, "shadow mode: forwarding a refused request")
	effStart := g.cfg.Now()
	out, effErr := g.applyEffect(ectx, req.Effect, r, prev) // a panic is an unknown outcome (shadowLost below)
	release()
	g.cfg.Observe.Effect(BackendOf(req.Target), cmp.Or(out.State, fencegate.ReceiptUnknown), fencegate.ErrorCode(effErr), g.cfg.Now().Sub(effStart))
	out = g.adoptShadowVersion(ctx, req.Target, prev, out, effErr)
	if out.State == "" || out.State == fencegate.ReceiptUnknown {
		// It may have landed: its object's version is adopted when a later
		// write meets it (adoptShadowVersion).
		g.shadowLost.add(req.Target, r.ID)
	}
	if out.State == fencegate.ReceiptCommitted {
		if err := g.cfg.Store.SwapVersion(context.WithoutCancel(ctx), req.Target, prev, out.Version); err != nil {
			g.cfg.Log.ErrorContext(ctx, "shadow mode: could not record the forwarded version", "target", req.Target, "err", err)
			g.shadowLost.add(req.Target, r.ID) // landed, its version unrecorded: adopted when a write meets it
		}
	}
	if out.State == "" {
		out.State = fencegate.ReceiptUnknown
	}
	r.State, r.Version, r.Response = out.State, out.Version, out.Response
	return Result{Receipt: r, Verdict: code}, effErr
}

// adoptShadowVersion records, for a write that failed its condition on an
// object written by one of this process's shadow forwards whose outcome it
// never learned (errShadowWritten, the object's shadow receipt in
// g.shadowLost for target), that object's version as target's, replacing
// prev, so that the next write of the key chains on it; the outcome it
// returns no longer carries the version (a FAILED receipt records none).
// An object naming any other shadow receipt (metadata another writer set
// behind the gateway's back, a restored copy, another process's forward)
// stays a BACKEND_CONFLICT like any change outside the gateway. Other
// outcomes pass through.
func (g *Gateway) adoptShadowVersion(ctx context.Context, target, prev string, out fencegate.Outcome, effErr error) fencegate.Outcome {
	var sw *shadowWritten
	if !errors.As(effErr, &sw) || out.Version == "" {
		return out
	}
	etag := out.Version
	out.Version = ""
	if !g.shadowLost.take(target, sw.receiptID) {
		return out
	}
	if err := g.cfg.Store.SwapVersion(context.WithoutCancel(ctx), target, prev, etag); err != nil {
		g.shadowLost.add(target, sw.receiptID) // the next write tries again
		g.cfg.Log.ErrorContext(ctx, "could not record the version a shadow-mode forward wrote", "target", target, "err", err)
	} else {
		g.cfg.Log.WarnContext(ctx, "recorded the version a shadow-mode forward wrote without an answer", "target", target, "receipt", sw.receiptID)
	}
	return out
}

// maxLostShadows bounds the shadow forwards of unknown outcome a process
// remembers; beyond it the oldest are forgotten (their targets then need an
// operator, as after a restart).
const maxLostShadows = 10_000

// lostShadows is the set of shadow forwards, by target, whose outcome is
// not known. It lives in the process: a restart forgets it.
type lostShadows struct {
	mu    sync.Mutex
	ids   map[string]map[string]bool // target -> shadow receipt IDs
	order []string                   // target + "\x00" + ID, oldest first
}

func (l *lostShadows) add(target, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ids == nil {
		l.ids = map[string]map[string]bool{}
	}
	if l.ids[target] == nil {
		l.ids[target] = map[string]bool{}
	}
	l.ids[target][id] = true
	l.order = append(l.order, target+"\x00"+id)
	for len(l.order) > maxLostShadows {
		t, i, _ := strings.Cut(l.order[0], "\x00")
		l.order = l.order[1:]
		l.drop(t, i)
	}
}

// take reports whether id is a lost shadow forward of target, forgetting it.
func (l *lostShadows) take(target, id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ids[target][id] {
		return false
	}
	l.drop(target, id)
	return true
}

func (l *lostShadows) drop(target, id string) {
	delete(l.ids[target], id)
	if len(l.ids[target]) == 0 {
		delete(l.ids, target)
	}
}
