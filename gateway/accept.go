package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore"
	"github.com/fencegate/fencegate/internal/logctx"
)

// Request is one fenced mutation as the acceptance point sees it. The handler
// has authenticated Caller and derived Resource and Target canonically.
type Request struct {
	Caller      string
	GrantToken  string
	StatusToken string
	// DelegationToken is the Fence-Delegation header: set, the caller writes
	// as the delegate the owner's signed delegation names, under the same
	// fence and segment rules as the owner.
	DelegationToken string
	Segment         uint64
	Resource        string
	Target          string
	Method          string
	PayloadDigest   string
	// EffectKey is the worker's own key for the effect (Fence-Effect-Key), kept
	// in the receipt; "" for none.
	EffectKey string
	// PayloadSize and QuarantinePayload describe the payload for a
	// quarantine record, should the segment be refused as QUARANTINED (see
	// fencegate.AdmitRequest).
	PayloadSize       int64
	QuarantinePayload func() ([]byte, error)
	Effect            Effect
	// AssignSegment (with Segment 0) has Apply number the segment itself,
	// in arrival order under the resource's lock (see arrivalSegment): for
	// clients that cannot count segments, such as the S3 front door's.
	AssignSegment bool
}

// Effect performs a forwarded mutation for an admitted receipt. prev is the
// backend version last committed for the receipt's target. The Outcome is
// recorded as is; the error (nil for COMMITTED) is what the caller is answered.
type Effect interface {
	Apply(ctx context.Context, r fencegate.Receipt, prev string) (fencegate.Outcome, error)
}

// RequestKeeper is an Effect whose exact request is kept with its receipt
// (an API call, so the reconciler can resend it under the same key).
// KeptRequest is called once the grant is verified and before admission,
// with the receipt-to-be's resource, root, fence, segment, target and
// method; an error refuses the request with nothing stored.
type RequestKeeper interface {
	KeptRequest(r fencegate.Receipt) (*fencegate.EffectRequest, error)
}

// EffectFunc adapts a function to Effect.
type EffectFunc func(ctx context.Context, r fencegate.Receipt, prev string) (fencegate.Outcome, error)

// Apply calls f.
func (f EffectFunc) Apply(ctx context.Context, r fencegate.Receipt, prev string) (fencegate.Outcome, error) {
	return f(ctx, r, prev)
}

// Result is an accepted request.
type Result struct {
	Receipt fencegate.Receipt
	// Replay: the segment had been accepted before; nothing was forwarded.
	Replay bool
	// Verdict is set when shadow mode forwarded a request the acceptance
	// point refused: it is the refusal's code. The receipt is not stored.
	Verdict fencegate.Code
}

// Authorize runs steps 1 and 2 of the acceptance point: grant and status
// verification, epoch revocation, and the binding of caller, target and policy
// generation. It writes nothing; it reads fence state only to tell a
// superseded owner STALE_OWNER instead of STATUS_INVALID.
func (g *Gateway) Authorize(ctx context.Context, req Request) (fencegate.VerifiedGrant, fencegate.Status, error) {
	vg, st, _, err := g.authorize(ctx, req, true)
	return vg, st, err
}

// Precheck is Authorize as a request's headers arrive, before its body is
// read, so a refused request is answered early. In query mode it leaves the
// registry query to admission: a write costs one query, not two.
// A refusal is journaled here unless the resource is in shadow mode, where
// Apply journals what it forwards.
func (g *Gateway) Precheck(ctx context.Context, req Request) error {
	_, _, _, err := g.authorize(ctx, req, false)
	if err != nil && g.cfg.Modes.For(req.Resource) != Shadow {
		g.note(req, Result{}, err)
	}
	return err
}

// authorize is Authorize (query false: Precheck's, leaving the registry
// query to admission), also returning a delegated request's verified
// delegation (nil for the owner's own request), which admission records in
// the receipt.
func (g *Gateway) authorize(ctx context.Context, req Request, query bool) (_ fencegate.VerifiedGrant, _ fencegate.Status, _ *fencegate.Delegation, err error) {
	var none fencegate.VerifiedGrant
	ctx, span := g.startSpan(ctx, "fencegate.verify")
	defer func() { endSpan(span, err) }()
	logctx.Add(ctx, slog.String("caller", req.Caller), slog.String("resource", req.Resource), slog.Uint64("segment", req.Segment))
	if req.Caller == "" {
		return none, fencegate.Status{}, nil, fencegate.Errorf(fencegate.CodeUnauthenticated, "no workload credential")
	}
	if req.GrantToken == "" {
		return none, fencegate.Status{}, nil, fencegate.Errorf(fencegate.CodeGrantInvalid, "Fence-Grant header is required")
	}
	vg, err := g.cfg.Verifier.VerifyGrant(req.GrantToken)
	if err != nil {
		return none, fencegate.Status{}, nil, asCode(err, fencegate.CodeGrantInvalid)
	}
	logctx.Add(ctx, slog.Uint64("fence", vg.FenceToken))
	if span.IsRecording() { // the attributes' slice would be allocated for a span that records nothing
		span.SetAttributes(attribute.Int64("fencegate.fence", int64(vg.FenceToken)), attribute.Int64("fencegate.segment", int64(req.Segment)))
	}
	if g.cfg.Policy.EpochRevoked(vg.IssuerEpoch) {
		return none, fencegate.Status{}, nil, fencegate.Errorf(fencegate.CodeEpochRevoked, "issuer epoch %d is revoked", vg.IssuerEpoch)
	}
	d, err := g.delegation(req, vg)
	if err != nil {
		return none, fencegate.Status{}, nil, err
	}
	var st fencegate.Status
	switch {
	case g.cfg.Querier != nil && !query: // asked once, at admission
	case g.cfg.Querier != nil && d != nil:
		dq, ok := g.cfg.Querier.(DelegationQuerier)
		if !ok {
			return none, fencegate.Status{}, nil, fencegate.Errorf(fencegate.CodeUnsupported, "this gateway's registry query cannot state delegations")
		}
		st, err = askRegistry(ctx, vg, func(ctx context.Context) (fencegate.Status, error) { return dq.GrantDelegationStatus(ctx, vg, *d) })
	case g.cfg.Querier != nil:
		st, err = askRegistry(ctx, vg, func(ctx context.Context) (fencegate.Status, error) { return g.cfg.Querier.GrantStatus(ctx, vg) })
	case req.StatusToken == "":
		err = fencegate.Errorf(fencegate.CodeStatusInvalid, "Fence-Status header is required")
	default:
		if d != nil {
			st, err = g.cfg.Verifier.(DelegationVerifier).VerifyDelegationStatus(req.StatusToken, vg, d.ID)
		} else {
			st, err = g.cfg.Verifier.VerifyStatus(req.StatusToken, vg)
		}
		if err == nil && query && (req.Segment == 1 || req.AssignSegment) && g.cfg.Confirm != nil {
			// A grant's first write is confirmed at the registry too.
			_, err = askRegistry(ctx, vg, func(ctx context.Context) (fencegate.Status, error) { return g.cfg.Confirm.GrantStatus(ctx, vg) })
		}
	}
	if err != nil {
		if stale := g.supersededBy(ctx, req.Caller == vg.Owner || d != nil, vg); stale != nil {
			return none, fencegate.Status{}, nil, stale
		}
		return none, fencegate.Status{}, nil, asCode(err, fencegate.CodeStatusInvalid)
	}
	if g.cfg.Policy.EpochRevoked(st.IssuerEpoch) {
		return none, fencegate.Status{}, nil, fencegate.Errorf(fencegate.CodeEpochRevoked, "status proof of revoked issuer epoch %d", st.IssuerEpoch)
	}
	if d == nil && req.Caller != vg.Owner {
		return none, fencegate.Status{}, nil, fencegate.Errorf(fencegate.CodeOwnerMismatch, "caller %q is not the grant's owner", req.Caller)
	}
	if err := g.checkAccess(req, vg, d); err != nil {
		return none, fencegate.Status{}, nil, err
	}
	if !fencegate.Covers(vg.Resource, req.Resource) {
		return none, fencegate.Status{}, nil, fencegate.Errorf(fencegate.CodeResourceMismatch, "target %q is outside the grant's resource %q", req.Resource, vg.Resource)
	}
	if cur := g.cfg.Policy.PolicyGeneration(); vg.PolicyGeneration < cur {
		return none, fencegate.Status{}, nil, fencegate.Errorf(fencegate.CodePolicyStale, "grant policy generation %d is older than %d", vg.PolicyGeneration, cur)
	}
	return vg, st, d, nil
}

// queryTimeout bounds one question to the registry (askRegistry): in
// process its backend read has no deadline of its own, and a write waits on
// it holding its resource's lock. A remote registry's client has the same
// bound (newRemoteQuerier).
var queryTimeout = 5 * time.Second

// askRegistry asks the registry about vg within queryTimeout and turns its
// statement into a verdict (heldOrRefused); a query not answered in time is
// BACKEND_UNAVAILABLE (retry), never a verdict on the grant, while a
// verdict it did give stands.
func askRegistry(ctx context.Context, vg fencegate.VerifiedGrant, ask func(context.Context) (fencegate.Status, error)) (fencegate.Status, error) {
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	st, err := ask(qctx)
	if err != nil && qctx.Err() != nil && ctx.Err() == nil && !isVerdict(err) && fencegate.ErrorCode(err) != fencegate.CodeDelegationInvalid {
		err = fencegate.Errorf(fencegate.CodeBackendUnavailable, "the registry did not answer the status query within %s", queryTimeout)
	}
	return st, heldOrRefused(st, err, vg)
}

// heldOrRefused turns a registry's statement about a grant (an owner's,
// a delegated write's, or a first write's confirmation) into a verdict.
func heldOrRefused(st fencegate.Status, err error, vg fencegate.VerifiedGrant) error {
	switch {
	case err != nil:
		return err
	case st.State == fencegate.StateRevoked:
		return fencegate.Errorf(fencegate.CodeEpochRevoked, "the registry states grants of epoch %d revoked", vg.IssuerEpoch)
	case st.State != fencegate.StateHeld:
		return fencegate.Errorf(fencegate.CodeStatusInvalid, "lease is %s, not HELD", st.State)
	}
	return nil
}

// Apply is applyFencedMutation: Authorize, admit in one store transaction,
// forward the effect unless the segment is a replay, and settle the receipt.
// A refusal, or a write shadow mode forwarded despite one, is journaled.
func (g *Gateway) Apply(ctx context.Context, req Request) (Result, error) {
	res, err := g.apply(ctx, req)
	g.note(req, res, err)
	return res, err
}

func (g *Gateway) apply(ctx context.Context, req Request) (Result, error) {
	if req.Segment == 0 && !req.AssignSegment {
		return Result{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "Fence-Segment must be an integer >= 1")
	}
	shadow := g.cfg.Modes.For(req.Resource) == Shadow
	// Verified again at admission even when the handler checked the headers
	// before reading the body: the proof must still hold now (cached, cheap).
	authorizedAt := g.cfg.Now()
	vg, st, d, err := g.authorize(ctx, req, true)
	if err != nil {
		if shadow && isVerdict(err) {
			return g.shadowForward(ctx, req, nil, err, false)
		}
		return Result{}, err
	}
	// The status must still hold when the segment is admitted: a request
	// that waited for the resource (this process's lock, another replica's
	// effect) past its status's expiry, or longer than reauthorizeAfter, is
	// authorized again before the admission attempt (and admitted as of
	// then: recheck returns when, zero if the first verdict still holds).
	recheck := func() (time.Time, error) {
		now := g.cfg.Now()
		expired := st.ExpiresAtMs != 0 && now.UnixMilli() >= st.ExpiresAtMs
		if !expired && now.Sub(authorizedAt) < reauthorizeAfter {
			return time.Time{}, nil
		}
		var err error
		if _, st, err = g.Authorize(ctx, req); err != nil {
			return time.Time{}, err
		}
		authorizedAt = now
		return now, nil
	}
	held, err := g.lockResource(ctx, vg.Resource)
	if err != nil {
		return Result{}, err
	}
	defer held.unlock()

	// Admission is not abandoned when the caller hangs up mid-transaction.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), admitTimeout)
	defer cancel()
	if req.Segment == 0 {
		if req.Segment, err = g.arrivalSegment(actx, vg, req); err != nil {
			return Result{}, err
		}
	}
	areq := fencegate.AdmitRequest{
		Grant: vg, Segment: req.Segment, Target: req.Target, Method: req.Method,
		PayloadDigest: req.PayloadDigest, EffectKey: req.EffectKey, ReceiptID: g.cfg.NewID(), Now: g.cfg.Now(),
		PayloadSize: req.PayloadSize, QuarantinePayload: req.QuarantinePayload, EffectTimeout: g.cfg.EffectTimeout,
	}
	if d != nil {
		// The receipt names who made a delegated write: the delegate
		// (the caller, checked against the delegation) and the delegation.
		areq.Delegate, areq.DelegationID = d.Delegate, d.ID
	}
	if k, ok := req.Effect.(RequestKeeper); ok {
		// A request that cannot be kept (its key cannot be placed) is
		// malformed, in shadow mode too: refused before anything is stored.
		if areq.Request, err = k.KeptRequest(fencegate.Receipt{Resource: vg.Resource, OperationRoot: vg.OperationRoot,
			FenceToken: vg.FenceToken, Segment: req.Segment, Target: req.Target, Method: req.Method}); err != nil {
			return Result{}, err
		}
	}
	// This process's deferred settle of the resource becomes durable first:
	// folded into this admission, or (a store that cannot fold) settled now.
	prior := g.takeDeferred(vg.Resource)
	switch {
	case prior != nil && g.folds:
		// A malformed request is refused before it carries the settle
		// (stores refuse it before deciding anything, the settle included);
		// without a settle to fold the store's own check suffices.
		if err := fencestore.ValidateAdmit(&areq); err != nil {
			g.deferred.release(prior)
			return Result{}, err
		}
		areq.Prior = &fencegate.PriorSettle{ReceiptID: prior.id, Outcome: prior.out}
	case prior != nil:
		if !g.settleDeferred(g.cfg.Background, prior) {
			return Result{}, &fencegate.Error{Code: fencegate.CodeBackendUnavailable,
				Message: "the fence store failed recording the previous write on the resource; nothing was admitted or forwarded"}
		}
		prior = nil
	}
	others := g.writing.Add(1) - 1 // writes of this process in flight beside this one
	defer g.writing.Add(-1)
	staging := g.startStage(actx, req.Effect, &areq, others) // beside the admission: stage.go
	defer g.dropStaged(staging)                              // a panic's: once published, its Discard does nothing
	admStart := g.cfg.Now()
	actx, span := g.startSpan(actx, "fencegate.admit")
	adm, err := g.admit(actx, areq, recheck, prior)
	endSpan(span, err)
	g.admitted(staging, req.Effect, vg.Resource, err != nil || adm.Replay)
	g.cfg.Observe.Admission(admissionOutcome(adm, err), g.cfg.Now().Sub(admStart))
	if err == nil && !adm.Replay && req.Segment == 1 {
		g.cfg.Observe.FirstWrite(vg.Resource, vg.FenceToken, vg.IssuedTime(), g.cfg.Now())
	}
	if err != nil {
		if fencegate.ErrorCode(err) == fencegate.CodeFenceRegression {
			g.cfg.Log.ErrorContext(ctx, "fence regression", "resource", vg.Resource, "fence", vg.FenceToken, "lease", vg.Lease, "err", err)
			if g.cfg.Alarm != nil {
				g.cfg.Alarm.FenceRegression(vg.Resource, vg.FenceToken, err)
			}
		}
		if shadow && isVerdict(err) {
			return g.shadowForward(ctx, req, &vg, err, true)
		}
		return Result{}, err
	}
	if adm.Replay {
		return g.replay(ctx, adm.Receipt)
	}
	return g.forward(ctx, adm, g.useStaged(staging, req.Effect, adm.Receipt))
}

// applyEffect is eff.Apply (of forward, and of a shadow forward), except
// that a panic in it (a bug in an effect, after it may have sent its
// request) is logged and becomes an UNKNOWN outcome: forward settles it at
// once instead of unwinding past the settle and leaving the receipt
// PENDING, its resource busy, until the orphan pass; a shadow forward
// counts it as possibly landed.
// No resend is allowed by it: whether the request went out, and under
// which key, is not known here.
func (g *Gateway) applyEffect(ctx context.Context, eff Effect, r fencegate.Receipt, prev string) (out fencegate.Outcome, err error) {
	defer unknownOnPanic(ctx, g.cfg.Log, "the effect", r.ID, &out, &err)
	return eff.Apply(ctx, r, prev)
}

// unknownOnPanic, deferred around code that may have sent a request for
// receipt id (an effect, a resolver's resend), turns a panic in it into an
// UNKNOWN outcome and MUTATION_UNKNOWN (logged with its stack): what was
// sent before it is not known, so no resend is allowed either.
func unknownOnPanic(ctx context.Context, log *slog.Logger, what, id string, out *fencegate.Outcome, err *error) {
	v := recover()
	if v == nil {
		return
	}
	log.ErrorContext(ctx, what+" panicked; its outcome is unknown", "receipt", id, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	*out = fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: fmt.Sprint(what, " failed (a panic): ", v)}
	*err = &fencegate.Error{Code: fencegate.CodeMutationUnknown, Message: what + " failed while it ran; its outcome is unknown", ReceiptID: id}
}

// forward runs the effect detached from the caller's cancellation (a client
// that hangs up must not leave the receipt PENDING) and settles the receipt.
func (g *Gateway) forward(ctx context.Context, adm fencegate.Admission, eff Effect) (Result, error) {
	// The effect ends at its expiry, effectTimeout after the receipt was
	// created, not effectTimeout after a slow admission returned: the
	// store's refusal of late requests, the reconciler's grace and
	// reconcile.orphan are all counted from the receipt's creation, and a
	// body still streaming through this connection (or an API call in
	// flight) must not outlive what they assume.
	expiry := EffectExpiry(adm.Receipt, g.cfg.EffectTimeout)
	detached := context.WithoutCancel(ctx)
	ectx, cancel := context.WithTimeout(detached, min(g.cfg.EffectTimeout, expiry.Sub(g.cfg.Now())))
	defer cancel()
	// Every request of the effect carries its expiry to the store, so that
	// none lands after the reconciler may call the receipt NOT_APPLIED.
	ectx = fencegate.WithLandBy(ectx, expiry)
	effStart := g.cfg.Now()
	ectx, span := g.startSpan(ectx, "fencegate.effect")
	if span.IsRecording() {
		span.SetAttributes(attribute.String("fencegate.backend", BackendOf(adm.Receipt.Target)))
	}
	out, effErr := g.applyEffect(ectx, eff, adm.Receipt, adm.PreviousVersion)
	out = g.adoptShadowVersion(ctx, adm.Receipt.Target, adm.PreviousVersion, out, effErr)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("fencegate.receipt_state", string(out.State)))
	}
	endSpan(span, effErr)
	if out.State == "" {
		out.State = fencegate.ReceiptUnknown
	}
	g.cfg.Observe.Effect(BackendOf(adm.Receipt.Target), out.State, fencegate.ErrorCode(effErr), g.cfg.Now().Sub(effStart))
	if g.cfg.Failpoint != nil {
		g.cfg.Failpoint("after-effect")
	}
	out.Now = g.cfg.Now()
	if g.deferrable(adm.Receipt, eff, out) {
		if r, ok := g.deferSettle(adm.Receipt, out); ok {
			return Result{Receipt: r}, nil
		}
	}
	if out.State != fencegate.ReceiptCommitted {
		// By the time the store takes this settle (a slow connection, or
		// the retry queue below), another replica may have taken the
		// receipt for an orphan and resent its effect: what this forward
		// learnt (FAILED: nothing sent; UNKNOWN) then no longer holds. A
		// COMMITTED, proven, holds whatever came since.
		out.IfPending = true
	}
	// Bounded as every other store call of a write (settleOrQueue): a
	// store that stops answering must not hold the resource's lock.
	sctx, span := g.startSpan(detached, "fencegate.settle")
	r, err := g.settleOrQueue(sctx, adm.Receipt.ID, out)
	endSpan(span, err)
	g.cfg.Observe.Settle(out.State, g.cfg.Now().Sub(out.Now))
	if err != nil {
		if !isRuling(err) {
			g.cfg.Log.ErrorContext(ctx, "settle failed; retrying in the background", "receipt", adm.Receipt.ID, "state", out.State, "err", err)
		} else if fencegate.ErrorCode(err) == fencegate.CodeReceiptSettled {
			// Settled meanwhile (the reconciler or another replica took it as
			// orphaned and resent): the stored final state is the answer.
			if cur, rerr := g.storedReceipt(ctx, adm.Receipt.ID); rerr == nil && cur.State.Terminal() {
				g.cfg.Log.WarnContext(ctx, "settle found the receipt settled elsewhere; answering the stored state",
					"receipt", cur.ID, "stored", cur.State, "ours", out.State)
				// The stored state is answered as a replay's would be, but
				// this is the request's own admission, not a replay of an
				// earlier one: a COMMITTED is this write's effect.
				res, err := g.replay(ctx, cur)
				res.Replay = false
				return res, err
			}
		} else {
			g.cfg.Log.ErrorContext(ctx, "settle refused; receipt left for the reconciler", "receipt", adm.Receipt.ID, "err", err)
		}
		return Result{}, &fencegate.Error{Code: fencegate.CodeMutationUnknown, Message: "the effect's outcome could not be recorded yet; it is retried in the background", ReceiptID: adm.Receipt.ID, Err: err}
	}
	g.cfg.Observe.Settled(r.State)
	if out.State == fencegate.ReceiptUnknown {
		return Result{Receipt: r}, &fencegate.Error{Code: fencegate.CodeMutationUnknown, Message: "the effect's outcome is unknown; the reconciler will settle it", ReceiptID: r.ID, Err: effErr}
	}
	if effErr != nil {
		var fe *fencegate.Error
		if errors.As(effErr, &fe) && fe.ReceiptID == "" {
			cp := *fe
			cp.ReceiptID = r.ID
			effErr = &cp
		}
		return Result{Receipt: r}, effErr
	}
	return Result{Receipt: r}, nil
}

// asCode keeps a domain error's code, or wraps any other error under code.
func asCode(err error, code fencegate.Code) error {
	var fe *fencegate.Error
	if errors.As(err, &fe) {
		return err
	}
	return fencegate.Wrap(err, code, "verification failed")
}

// supersededBy diagnoses an authentic grant whose status is no longer valid:
// when a newer owner has already been accepted on the resource, the precise
// answer is STALE_OWNER (retrying with a fresh proof cannot help). It only
// reads fence state; the rule is the store's (fencestore.FenceOrder).
func (g *Gateway) supersededBy(ctx context.Context, bound bool, vg fencegate.VerifiedGrant) error {
	if !bound { // only the owner, or its verified delegate, learns the resource's fate
		return nil
	}
	rs, err := g.cfg.Store.Resource(ctx, vg.Resource)
	if err != nil {
		return nil
	}
	// Only STALE_OWNER is diagnosed here; a FENCE_REGRESSION is left to the
	// admission, which raises its alarm.
	if err := fencestore.FenceOrder(rs, vg); fencegate.ErrorCode(err) == fencegate.CodeStaleOwner {
		return err
	}
	return nil
}

// admitTimeout bounds one admission transaction.
const admitTimeout = 30 * time.Second
