package sim

import (
	"context"

	"github.com/fencegate/fencegate"
)

// The deferred settle's gates (gateway/deferred.go). A write answered
// COMMITTED must be settled COMMITTED at the answered version and read so
// through every gateway's read paths, after any crash; no admission on its
// resource may commit while its settle is not durable in the store; and the
// answering process sends no admission on the resource past its own
// deferred settle except the one that carries it as its Prior.

// answered is a write answered COMMITTED: by which process, at which version.
type answered struct {
	id, resource, version string
	gw, gen               int
}

// onAnswered records an accepted write's answer and checks it against what
// the store already holds.
func (w *world) onAnswered(gi *gwInst, gen int, r fencegate.Receipt) {
	a := &answered{id: r.ID, resource: r.Resource, version: r.Version, gw: gi.idx, gen: gen}
	if r.State != fencegate.ReceiptCommitted {
		w.stats.gate("answered COMMITTED, settled otherwise")
		w.fail("write answered as accepted with receipt %s in state %s", r.ID, r.State)
		return
	}
	if _, dup := w.answered[r.ID]; !dup {
		w.answeredIDs = append(w.answeredIDs, r.ID)
	}
	w.answered[r.ID] = a
	if st, ok := w.verdict[r.ID]; ok && st != fencegate.ReceiptCommitted {
		w.stats.gate("answered COMMITTED, settled otherwise")
		w.fail("receipt %s answered COMMITTED, but it was settled %s", r.ID, st)
	}
	cur, err := w.store.Receipt(context.Background(), r.ID)
	if err != nil || cur.State != fencegate.ReceiptCommitted {
		w.stats.inject("deferred settle answered")
		if !w.cfg.prove {
			w.stats.inject(noProofsItem)
		}
		if w.undurable[a.resource] == nil {
			w.undurable[a.resource] = map[string]*answered{}
		}
		w.undurable[a.resource][a.id] = a
	}
}

// settledAnswer checks a settle (or a folded prior) of an answered receipt:
// its state and version, what is guaranteed; not its SettledAt, which a
// proof after a crash records as its own (docs/deferred-settle.md, 1).
func (w *world) settledAnswer(r fencegate.Receipt) {
	a, ok := w.answered[r.ID]
	if !ok || r.State == fencegate.ReceiptPending {
		return
	}
	if r.State != fencegate.ReceiptCommitted || r.Version != a.version {
		w.stats.gate("answered COMMITTED, settled otherwise")
		w.fail("receipt %s answered COMMITTED at %q, settled %s at %q", r.ID, a.version, r.State, r.Version)
	}
}

// durableNow drops the answers of resource whose settle the store holds
// and returns the others.
func (w *world) durableNow(resource string) []*answered {
	var left []*answered
	for id, a := range w.undurable[resource] {
		if r, err := w.store.Receipt(context.Background(), id); err == nil && r.State == fencegate.ReceiptCommitted {
			delete(w.undurable[resource], id)
			continue
		}
		left = append(left, a)
	}
	return left
}

// checkAdmitSend is the gate at an admission's sending: the process sends
// none past its own deferred settle of the resource, except as its Prior.
func (w *world) checkAdmitSend(ctx context.Context, req fencegate.AdmitRequest) {
	ri := reqOf(ctx)
	if ri == nil {
		return
	}
	for _, a := range w.durableNow(req.Grant.Resource) {
		if a.gw != ri.gw.idx || a.gen != ri.gen || req.Prior != nil && req.Prior.ReceiptID == a.id {
			continue
		}
		w.stats.gate("admission sent past its own deferred settle")
		w.fail("gw%d/%d sent an admission on %s while its deferred settle of %s was not durable (prior %v)",
			a.gw, a.gen, req.Grant.Resource, a.id, req.Prior != nil)
	}
	if req.Prior != nil {
		w.stats.inject("deferred settle folded")
	}
}

// checkAdmitted is the gate after an admission committed: every answered
// settle of the resource is durable.
func (w *world) checkAdmitted(resource string) {
	for _, a := range w.durableNow(resource) {
		w.stats.gate("admitted past a deferred settle")
		w.fail("admission on %s committed while the settle of %s (answered by gw%d/%d) was not durable", resource, a.id, a.gw, a.gen)
	}
}

// readReceipt reads an answered receipt through a gateway's read paths (as
// a client would): it must be COMMITTED at the answered version. Without
// prompt proofs (-sim.prove=false) only the answering process, while it
// lives, is held to it before the end.
func (w *world) readReceipt(ctx context.Context) {
	if len(w.answeredIDs) == 0 {
		return
	}
	a := w.answered[w.answeredIDs[w.rng.IntN(len(w.answeredIDs))]]
	gi := w.gws[w.rng.IntN(len(w.gws))]
	if !w.cfg.prove && (gi.idx != a.gw || gi.gen != a.gen) {
		return
	}
	w.readAnswer(ctx, gi, a, w.rng.IntN(3))
}

// checkAnswers reads every answered receipt through a gateway once all has
// settled.
func (w *world) checkAnswers(ctx context.Context) {
	for _, id := range w.answeredIDs {
		w.readAnswer(ctx, w.gws[0], w.answered[id], 0)
	}
}

// readAnswer reads a through gi's Store(): by ID, by segment or in the
// resource's list (how).
func (w *world) readAnswer(ctx context.Context, gi *gwInst, a *answered, how int) {
	defer survive()
	st := gi.g.Store()
	var r fencegate.Receipt
	var err error
	switch how {
	case 0:
		r, err = st.Receipt(ctx, a.id)
	case 1:
		var raw fencegate.Receipt
		if raw, err = w.store.Receipt(ctx, a.id); err == nil {
			r, err = st.ReceiptAt(ctx, raw.Resource, raw.FenceToken, raw.Segment)
		}
	default:
		var p fencegate.ReceiptPage
		page := fencegate.Page{Limit: fencegate.MaxPageLimit}
		for err == nil && r.ID == "" {
			if p, err = st.ReceiptsByResource(ctx, a.resource, page); err != nil {
				break
			}
			for _, x := range p.Receipts {
				if x.ID == a.id {
					r = x
				}
			}
			if p.Next == "" {
				break
			}
			page.Cursor = p.Next
		}
	}
	if fencegate.ErrorCode(err) == fencegate.CodeNotFound || err == nil && r.ID != a.id {
		// Compaction is off: a receipt answered COMMITTED is never missing.
		w.stats.gate("answered COMMITTED, read otherwise")
		w.fail("receipt %s answered COMMITTED by gw%d/%d is missing from a read (%d) through gw%d/%d: %v", a.id, a.gw, a.gen, how, gi.idx, gi.gen, err)
		return
	}
	if err != nil {
		return // a read that failed (a store fault): nothing read
	}
	w.stats.inject("receipt read through a gateway")
	if r.State != fencegate.ReceiptCommitted || r.Version != a.version {
		w.stats.gate("answered COMMITTED, read otherwise")
		w.fail("receipt %s answered COMMITTED at %q by gw%d/%d reads %s at %q through gw%d/%d", a.id, a.version, a.gw, a.gen,
			r.State, r.Version, gi.idx, gi.gen)
	}
}
