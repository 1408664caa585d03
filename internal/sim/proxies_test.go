package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

var errInjected = errors.New("sim: injected fault")

// storeProxy is the network between the gateways and their fence store:
// every call is an interception point; calls may fail before reaching the
// store or lose their acknowledgement after it committed.
type storeProxy struct {
	fencegate.FenceStore // listings pass through unintercepted
	w                    *world
	inner                fencegate.FenceStore
}

var _ fencegate.PriorSettling = (*storeProxy)(nil)

// SettlesPrior is the store's: a gateway folds its deferred settles into
// admissions exactly when the real store would take them.
func (p *storeProxy) SettlesPrior() bool {
	ps, ok := p.inner.(fencegate.PriorSettling)
	return ok && ps.SettlesPrior()
}

func (p *storeProxy) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	w := p.w
	sentAt := w.clock.Now() // the gateway's decision; the hop to the store follows
	w.point(ctx, "admit")
	if w.chance(0.01) {
		w.stats.inject("fence store unreachable")
		return fencegate.Admission{}, fencegate.Wrap(errInjected, fencegate.CodeBackendUnavailable, "fence store unreachable")
	}
	w.checkAdmitSend(ctx, req)
	held := w.heldByAnother(req) // before the call: committed before it
	// A request the simulation forged must leave the store as it was,
	// whatever the store answers (DESIGN §3: a request that fails step 1
	// or 2 changes no stored state): a refusal there that writes a
	// quarantine record, moves the fence or keeps a receipt is as wrong as
	// an admission. The resource's state is read right before and after
	// the call: nothing else runs on the resource in between (a batch's
	// calls are of other resources).
	forged := reqOf(ctx) != nil && reqOf(ctx).forged
	var before, after string
	var adm fencegate.Admission
	var err error
	p.send(ctx, req.Grant.Resource, func() {
		if forged {
			before = p.view(ctx, req.Grant.Resource, req.Target)
		}
		adm, err = p.inner.Admit(ctx, req)
		w.committedAdmit(adm, err)
		if forged {
			after = p.view(ctx, req.Grant.Resource, req.Target)
		}
	})
	if forged {
		w.stats.inject("forged request reached the fence store")
		if before != after {
			w.stats.gate("auth failure touched state")
			w.fail("forged request on %s fence %d seg %d (lease %s) answered %v changed the fence store:\n  before %s\n  after  %s",
				req.Grant.Resource, req.Grant.FenceToken, req.Segment, req.Grant.Lease, errOrOK(err), before, after)
		}
	}
	w.checkRegressionAnswer(req, held, adm, err)
	if adm.Prior != nil {
		w.onSettled(*adm.Prior)
	}
	if err == nil {
		w.resOf[adm.Receipt.ID] = adm.Receipt.Resource
	}
	if err == nil && !adm.Replay {
		w.onAdmitted(ctx, req, sentAt)
		w.checkAdmitted(req.Grant.Resource)
	}
	w.tracef("  admit %s fence %d seg %d lease %s (authorized at %s) -> replay %v %v", req.Grant.Resource, req.Grant.FenceToken,
		req.Segment, req.Grant.Lease, req.Now.Format("15:04:05.000"), adm.Replay, err)
	if err == nil && w.chance(0.02) {
		w.stats.inject("lost transaction ACK")
		return fencegate.Admission{}, fmt.Errorf("commit acknowledgement lost: %w", errInjected)
	}
	w.point(ctx, "after-admit")
	return adm, err
}

func (p *storeProxy) Settle(ctx context.Context, id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	w := p.w
	w.forgedWrite(ctx, "settle "+id)
	w.point(ctx, "settle")
	if w.chance(0.01) {
		w.stats.inject("fence store unreachable")
		return fencegate.Receipt{}, fencegate.Wrap(errInjected, fencegate.CodeBackendUnavailable, "fence store unreachable")
	}
	if w.chance(0.01) {
		// A hung connection: the settle reaches the store much later, when
		// a reconciler may have taken the receipt for an orphan and resent
		// its effect.
		w.stats.inject("slow settle")
		w.s.sleep(ctx, time.Duration(30+w.rng.IntN(60))*time.Second)
	}
	var r fencegate.Receipt
	var err error
	p.send(ctx, w.resOf[id], func() { r, err = p.inner.Settle(ctx, id, o); w.committedSettle(r, err) })
	if err == nil {
		if _, deferred := w.undurable[r.Resource][id]; deferred {
			w.stats.inject("deferred settle flushed")
		}
		w.onSettled(r)
	}
	if err == nil && w.chance(0.01) {
		w.stats.inject("lost transaction ACK")
		return fencegate.Receipt{}, fmt.Errorf("settle acknowledgement lost: %w", errInjected)
	}
	w.point(ctx, "after-settle")
	return r, err
}

// storeBatch is fence-store calls of different tasks on different resources
// that reach the store together, so that a store's group commit (embedded,
// postgres) gathers them into one transaction. Calls on distinct resources
// decide independently of their order, so the run stays deterministic.
type storeBatch struct {
	res   map[string]bool
	calls []func()
	done  bool
}

// maxBatchCalls bounds a storeBatch (the simulation has 4 resources), and
// gatherFor the time its opener waits for others to join. storeGather is
// how long the store waits for the calls of a batch in a gatherWorld:
// real time, which every lone write of those worlds also waits, so kept
// short (1 ms caught as many as 2 ms, 0.5 ms a few less).
const (
	maxBatchCalls = 4
	gatherFor     = 200 * time.Millisecond
	storeGather   = time.Millisecond
)

// gatherWorld reports whether seed's world turns the store's batch gather
// on (embedded and postgres WithBatchGather: up to storeGather for
// maxBatchCalls writes), so that the calls a storeBatch sends together
// share one transaction instead of each committing alone (the first call of
// an idle store does not wait for company, and a local commit is quick):
// three worlds in four (not seed%3, which picks the deferred settle
// window); the fourth runs the store as production does.
func gatherWorld(seed uint64) bool { return seed%4 != 0 }

// send makes call, the store call of the running task on resource: joined to
// the batch being gathered when it can be, else now, or (a fifth of the
// time) it opens a batch: it waits up to gatherFor for other tasks to join, then
// runs every call of the batch at once and waits for all. resource "" is
// never batched.
func (p *storeProxy) send(ctx context.Context, resource string, call func()) {
	w := p.w
	if b := w.gathering; resource != "" && b != nil && !b.res[resource] && len(b.calls) < maxBatchCalls {
		b.res[resource] = true
		b.calls = append(b.calls, call)
		for !b.done {
			w.s.sleep(ctx, gatherFor/4)
		}
		return
	}
	if resource == "" || w.gathering != nil || w.rng.IntN(3) != 0 {
		call()
		return
	}
	b := &storeBatch{res: map[string]bool{resource: true}, calls: []func(){call}}
	w.gathering = b
	w.s.sleep(ctx, time.Duration(w.rng.Int64N(int64(gatherFor))))
	w.gathering = nil
	var wg sync.WaitGroup
	start := make(chan struct{}) // all at once, as close together as Go starts them
	for _, c := range b.calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c()
		}()
	}
	close(start)
	wg.Wait()
	b.done = true
	if len(b.calls) > 1 {
		w.stats.inject("fence store calls sent together")
	}
}

func (p *storeProxy) Resource(ctx context.Context, res string) (fencegate.ResourceState, error) {
	p.w.point(ctx, "read")
	return p.inner.Resource(ctx, res)
}

func (p *storeProxy) Receipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	p.w.point(ctx, "read")
	return p.inner.Receipt(ctx, id)
}

func (p *storeProxy) ReceiptAt(ctx context.Context, res string, f, s uint64) (fencegate.Receipt, error) {
	p.w.point(ctx, "read")
	return p.inner.ReceiptAt(ctx, res, f, s)
}

func (p *storeProxy) Version(ctx context.Context, target string) (string, error) {
	p.w.point(ctx, "read")
	return p.inner.Version(ctx, target)
}

func (p *storeProxy) SwapVersion(ctx context.Context, target, from, to string) error {
	p.w.forgedWrite(ctx, "swap the version of "+target)
	p.w.point(ctx, "swap")
	return p.inner.SwapVersion(ctx, target, from, to)
}

func (p *storeProxy) Close() error { return nil }

// view is what the fence store holds of resource and target, for the gate
// on forged requests: the resource's row, its receipts, its quarantine
// records and the target's version, as JSON (a read that fails is part of
// the view: a store that fails to read both times compares equal).
func (p *storeProxy) view(ctx context.Context, resource, target string) string {
	ctx = context.WithoutCancel(ctx)
	var b strings.Builder
	put := func(what string, v any, err error) {
		j, _ := json.Marshal(v)
		fmt.Fprintf(&b, "%s %s %v; ", what, j, fencegate.ErrorCode(err))
	}
	rs, err := p.inner.Resource(ctx, resource)
	put("row", rs, err)
	for page := (fencegate.Page{Limit: fencegate.MaxPageLimit}); ; {
		rp, err := p.inner.ReceiptsByResource(ctx, resource, page)
		put("receipts", rp.Receipts, err)
		if err != nil || rp.Next == "" {
			break
		}
		page.Cursor = rp.Next
	}
	for page := (fencegate.Page{Limit: fencegate.MaxPageLimit}); ; {
		qp, err := p.inner.Quarantined(ctx, resource, page)
		put("quarantine", qp.Records, err)
		if err != nil || qp.Next == "" {
			break
		}
		page.Cursor = qp.Next
	}
	v, err := p.inner.Version(ctx, target)
	put("version", v, err)
	return b.String()
}

// forgedWrite fails a store write (what) made for a forged request: such a
// request is refused before the store (steps 1 and 2), so it settles and
// swaps nothing.
func (w *world) forgedWrite(ctx context.Context, what string) {
	if ri := reqOf(ctx); ri != nil && ri.forged {
		w.stats.gate("auth failure touched state")
		w.fail("forged request wrote the fence store: %s", what)
	}
}

func errOrOK(err error) string {
	if err == nil {
		return "OK"
	}
	return string(fencegate.ErrorCode(err))
}

// onAdmitted checks an admission against the ground truth: the gates on
// stale, skipped, regressed and expired-owner writes, and authentication.
func (w *world) onAdmitted(ctx context.Context, req fencegate.AdmitRequest, now time.Time) {
	g := &req.Grant
	if ri := reqOf(ctx); ri != nil {
		ri.admitted = true
		if ri.forged {
			w.stats.gate("forged accepted")
			w.fail("forged request admitted: %s fence %d seg %d", g.Resource, g.FenceToken, req.Segment)
		}
	}
	a := w.admitted[g.Resource]
	if a == nil {
		a = &admitted{}
		w.admitted[g.Resource] = a
	}
	switch {
	case g.FenceToken < a.fence:
		w.stats.gate("accepted stale")
		w.fail("stale admission on %s: fence %d after %d", g.Resource, g.FenceToken, a.fence)
	case g.FenceToken == a.fence && req.Segment != a.seg+1:
		w.stats.gate("skipped segment")
		w.fail("segment %d admitted after %d on %s fence %d", req.Segment, a.seg, g.Resource, g.FenceToken)
	case g.FenceToken > a.fence && req.Segment != 1:
		w.stats.gate("skipped segment")
		w.fail("fence %d on %s started at segment %d", g.FenceToken, g.Resource, req.Segment)
	}
	key := fmt.Sprint(g.Resource, "/", g.FenceToken)
	if l, ok := w.fenceOf[key]; ok && l != g.Lease {
		w.stats.gate("regressed token")
		w.fail("fence %d of %s admitted under leases %s and %s", g.FenceToken, g.Resource, l, g.Lease)
	}
	w.fenceOf[key] = g.Lease
	w.payloadOf[fmt.Sprint(key, "/", req.Segment)] = req.PayloadDigest
	if exp, ok := w.leaseExp[g.Lease]; !ok || !now.Before(exp) {
		w.stats.gate("expired owner")
		w.fail("admission on %s fence %d at %s: lease %s expired at %s", g.Resource, g.FenceToken,
			now.Format("15:04:05.000"), g.Lease, exp.Format("15:04:05.000"))
	}
	// The gateway authorizes at most reauthorizeAfter before it admits.
	const window = 10 * time.Millisecond
	if at, ok := w.auth.revokedAt[g.IssuerEpoch]; ok && now.Sub(at) > window {
		w.stats.gate("revoked epoch accepted")
		w.fail("grant of epoch %d admitted %v after the epoch was revoked", g.IssuerEpoch, now.Sub(at))
	}
	if at, ok := w.auth.staleAt[g.PolicyGeneration]; ok && now.Sub(at) > window {
		w.stats.gate("stale policy accepted")
		w.fail("grant of policy generation %d admitted %v after it went stale", g.PolicyGeneration, now.Sub(at))
	}
	if g.FenceToken >= a.fence {
		a.fence, a.seg, a.lease = g.FenceToken, req.Segment, g.Lease
	}
}

// onSettled mirrors the store's rule that a not-applied last segment gives its
// number back, and checks that an object write settled not applied is not
// what the object holds.
func (w *world) onSettled(r fencegate.Receipt) {
	if a := w.admitted[r.Resource]; a != nil && r.State.NotApplied() && a.fence == r.FenceToken && a.seg == r.Segment {
		a.seg--
	}
	prev, settledBefore := w.verdict[r.ID]
	if settledBefore && prev != r.State {
		w.stats.gate("final receipt changed")
		w.fail("receipt %s (%s fence %d seg %d) settled %s, then %s", r.ID, r.Resource, r.FenceToken, r.Segment, prev, r.State)
	}
	if r.State.Terminal() {
		w.verdict[r.ID] = r.State
	}
	w.oobSettled(r)
	// Checked when the receipt is first seen final: a repeat of that settle
	// (a queued retry whose first answer was lost) may come after the
	// segment was sent again under the same key and applied.
	if r.Request != nil && r.State.NotApplied() && !settledBefore {
		if _, applied := w.upstream.answers[r.Request.Key]; applied {
			w.stats.gate("landed after not applied")
			w.fail("receipt %s (%s fence %d seg %d) settled %s, but the upstream applied its key", r.ID, r.Resource, r.FenceToken, r.Segment, r.State)
		}
		// And later: a delivery held in the network must not apply it
		// either (upstream.RoundTrip), until the segment is admitted again.
		w.notAppliedMu.Lock()
		w.notApplied[r.Request.Key] = r.ID
		w.notAppliedMu.Unlock()
	}
	if r.State != fencegate.ReceiptPending {
		w.settledAnswer(r)
	}
	if _, key, ok := fencegate.SplitObjectTarget(r.Target); ok && r.State.NotApplied() {
		if info, err := w.objects.Head(context.Background(), key); err == nil {
			if m, ok := fencegate.ParseEffectMeta(info.Metadata); ok && m.ReceiptID == r.ID {
				w.stats.gate("landed after not applied")
				w.fail("receipt %s settled %s, but %s holds its write", r.ID, r.State, key)
			}
		}
	}
}

// committedAdmit keeps, in the order the store commits, the receipts of
// each resource not settled final, and fails an admission committed beside
// one: one effect in flight per resource, checked where it is decided (the
// gateway's forward sees only its own effects, not a reconciler's resends or
// a late delivery). A prior settle folded into the admission counts first.
func (w *world) committedAdmit(adm fencegate.Admission, err error) {
	w.unsettledMu.Lock()
	defer w.unsettledMu.Unlock()
	if p := adm.Prior; p != nil && p.State.Terminal() {
		delete(w.unsettled[p.Resource], p.ID)
	}
	if err != nil || adm.Replay {
		return
	}
	if rq := adm.Receipt.Request; rq != nil && rq.Key != "" {
		w.notAppliedMu.Lock()
		delete(w.notApplied, rq.Key) // admitted again: its sends carry the key anew
		w.notAppliedMu.Unlock()
	}
	res := adm.Receipt.Resource
	for id := range w.unsettled[res] {
		w.stats.gate("admitted beside an unsettled effect")
		w.errs = append(w.errs, fmt.Sprintf("admission %s on %s (fence %d seg %d) committed while receipt %s is not settled",
			adm.Receipt.ID, res, adm.Receipt.FenceToken, adm.Receipt.Segment, id))
	}
	if w.unsettled[res] == nil {
		w.unsettled[res] = map[string]bool{}
	}
	w.unsettled[res][adm.Receipt.ID] = true
	w.oobAdmitted(adm.Receipt)
}

// committedSettle is committedAdmit's side of a settle.
func (w *world) committedSettle(r fencegate.Receipt, err error) {
	w.unsettledMu.Lock()
	defer w.unsettledMu.Unlock()
	if err == nil && r.State.Terminal() {
		delete(w.unsettled[r.Resource], r.ID)
	}
}

// onLanded checks that an object write that lands has no receipt settled
// not applied: a write the reconciler gave up on must never land later.
func (w *world) onLanded(req fencegate.PutRequest) {
	w.oobLanded(req)
	if st, ok := w.verdict[req.Meta.ReceiptID]; ok && st.NotApplied() {
		w.stats.gate("landed after not applied")
		w.fail("write of receipt %s (fence %d seg %d) landed on %s after the receipt settled %s",
			req.Meta.ReceiptID, req.Meta.FenceToken, req.Meta.Segment, req.Key, st)
	}
}

// effect wraps a forwarded effect: it counts effects in flight per resource
// and the order of fences forwarded.
type effect struct {
	w     *world
	inner gateway.Effect
}

func (e effect) Apply(ctx context.Context, r fencegate.Receipt, prev string) (fencegate.Outcome, error) {
	w := e.w
	w.inflight[r.Resource]++
	defer func() { w.inflight[r.Resource]-- }()
	if w.inflight[r.Resource] > 1 {
		w.stats.gate("two effects in flight")
		w.fail("two effects in flight on %s (fence %d)", r.Resource, r.FenceToken)
	}
	if r.FenceToken < w.maxFwd[r.Resource] {
		w.stats.gate("accepted stale")
		w.fail("effect of fence %d forwarded on %s after fence %d", r.FenceToken, r.Resource, w.maxFwd[r.Resource])
	}
	w.maxFwd[r.Resource] = max(w.maxFwd[r.Resource], r.FenceToken)
	return e.inner.Apply(ctx, r, prev)
}

// ProvesItself is the wrapped effect's (an object PUT names its receipt).
func (e effect) ProvesItself() bool {
	p, ok := e.inner.(gateway.SelfProving)
	return ok && p.ProvesItself()
}

// keptEffect is an effect whose request the receipt keeps (an API call), so
// that the reconciler can resend it.
type keptEffect struct {
	effect
	keeper gateway.RequestKeeper
}

func (k keptEffect) KeptRequest(r fencegate.Receipt) (*fencegate.EffectRequest, error) {
	return k.keeper.KeptRequest(r)
}

// wrap counts inner's forwarding and keeps what it keeps.
func (w *world) wrap(inner gateway.Effect) gateway.Effect {
	if k, ok := inner.(gateway.RequestKeeper); ok {
		return keptEffect{effect{w, inner}, k}
	}
	return effect{w, inner}
}
