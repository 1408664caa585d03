package storetest

import (
	"errors"
	"fmt"

	"github.com/fencegate/fencegate"
)

// Folded settles (fencegate.AdmitRequest.Prior), for stores that implement
// fencegate.PriorSettling; a store that does not is skipped, by name.
//
// Each scenario runs twice: on the store under test, where every prior is
// folded into its Admit, and on a twin store of the same kind, where it is a
// plain Settle followed by an Admit without it. The contract makes the two
// the same (the folded settle is exactly that Settle, and the segment is
// decided on the state it left), so after every step the answers (the
// admission, the segment's refusal, the prior's receipt or refusal) and
// everything a client can read must agree, besides each step's own
// expectations checked on both.

// needPrior skips a subtest for a store that does not honour AdmitRequest.Prior.
func (f *fx) needPrior() {
	f.t.Helper()
	if ps, ok := f.s.(fencegate.PriorSettling); !ok || !ps.SettlesPrior() {
		f.t.Skipf("%T does not implement fencegate.PriorSettling (AdmitRequest.Prior): this rule runs once it does", f.s)
	}
}

// priors runs the steps of one scenario on one store.
type priors struct {
	f      *fx
	folded bool     // the prior rides in Admit; else Settle, then Admit
	steps  []string // each step's answer and the store's state after it
}

// want is what a step expects.
type want struct {
	seg   fencegate.Code // "" admitted, codeReplay, or the segment's refusal
	segID string         // the receipt that refusal names, or the replayed original ("" any)
	prior fencegate.Code // "" the prior settle applies, else its refusal
}

// codeReplay in want.seg expects a replay.
const codeReplay fencegate.Code = "replay"

// runPriors runs sc folded on f's store and plain on a twin, and requires
// every step to agree.
func runPriors(f *fx, sc func(f *fx, p *priors)) {
	f.t.Helper()
	f.needPrior()
	folded := &priors{f: f, folded: true}
	sc(f, folded)
	twin := newFixture(f.t, f.open(f.t), f.open)
	f.t.Cleanup(func() { _ = twin.s.Close() })
	plain := &priors{f: twin}
	sc(twin, plain)
	if len(folded.steps) != len(plain.steps) {
		f.t.Fatalf("%d folded steps, %d plain ones", len(folded.steps), len(plain.steps))
	}
	for i := range folded.steps {
		if folded.steps[i] != plain.steps[i] {
			f.t.Fatalf("step %d: the folded settle differs from Settle then Admit:\nfolded: %s\n plain: %s", i+1, folded.steps[i], plain.steps[i])
		}
	}
}

// committedAt is a COMMITTED outcome recording version.
func committedAt(version string) fencegate.Outcome {
	return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: version}
}

// admit runs req with the prior settle (id, o), o.Now defaulting to req.Now,
// checks the answers against w and the settle and admission rules, and
// records the step.
func (p *priors) admit(req fencegate.AdmitRequest, id string, o fencegate.Outcome, w want) fencegate.Admission {
	f := p.f
	f.t.Helper()
	if o.Now.IsZero() {
		o.Now = req.Now
	}
	what := fmt.Sprintf("admit %s fence %d segment %d with prior %s -> %s", req.Grant.Resource, req.Grant.FenceToken, req.Segment, id, o.State)
	before, berr := f.s.Receipt(f.ctx, id)
	found := berr == nil
	var (
		rowBefore     fencegate.ResourceState
		hasRow        bool
		versionBefore string
	)
	if found {
		row, err := f.s.Resource(f.ctx, before.Resource)
		rowBefore, hasRow = row, err == nil
		versionBefore = f.version(before.Target)
	} else {
		wantCode(f.t, berr, fencegate.CodeNotFound, "")
	}
	_, idErr := f.s.Receipt(f.ctx, req.ReceiptID)

	var (
		adm fencegate.Admission
		err error
	)
	if p.folded {
		r := req
		r.Prior = &fencegate.PriorSettle{ReceiptID: id, Outcome: o}
		adm, err = f.s.Admit(f.ctx, r)
	} else {
		var prior *fencegate.Receipt
		r, serr := f.s.Settle(f.ctx, id, o)
		if serr == nil {
			prior = &r
		}
		adm, err = f.s.Admit(f.ctx, req)
		adm.Prior, adm.PriorErr = prior, serr
	}
	if (adm.Prior == nil) == (adm.PriorErr == nil) {
		f.t.Fatalf("%s: Prior %v, PriorErr %v (segment: %v); want exactly one", what, adm.Prior, adm.PriorErr, err)
	}

	if w.prior == "" {
		if adm.PriorErr != nil {
			f.t.Fatalf("%s: prior refused: %v", what, adm.PriorErr)
		}
		repeat := before.State == o.State && o.State.Terminal() && before.Version == o.Version
		wantR, wantRow, wantVersion := before, rowBefore, versionBefore
		if !repeat {
			wantR, wantRow = settledAs(before, o), rowSettled(rowBefore, before, o)
			if o.State == fencegate.ReceiptCommitted {
				wantVersion = o.Version
			}
		}
		f.sameJSON(what+": prior's receipt", *adm.Prior, wantR)
		f.sameJSON(what+": stored prior receipt", f.receipt(id), wantR)
		if v := f.version(before.Target); v != wantVersion {
			f.t.Fatalf("%s: version of the prior's target %s = %q, want %q", what, before.Target, v, wantVersion)
		}
		// An admitted segment rewrites its own resource's row after the settle.
		if hasRow && (w.seg != "" || req.Grant.Resource != before.Resource) {
			f.sameJSON(what+": prior's resource", f.resource(before.Resource), wantRow)
		}
		if !repeat && o.State.NotApplied() {
			if live, err := f.s.ReceiptAt(f.ctx, before.Resource, before.FenceToken, before.Segment); err == nil && live.ID == id {
				f.t.Fatalf("%s: the %s prior is still live", what, o.State)
			}
		}
	} else {
		wantCode(f.t, adm.PriorErr, w.prior, "")
		if found {
			f.sameJSON(what+": receipt of the refused prior", f.receipt(id), before)
		}
	}

	switch w.seg {
	case "":
		if err != nil || adm.Replay {
			f.t.Fatalf("%s: %v (replay %v), want a new admission", what, err, adm.Replay)
		}
		f.admitted(req, adm)
		if v := f.version(req.Target); adm.PreviousVersion != v {
			f.t.Fatalf("%s: PreviousVersion = %q, want %q (the version the prior left)", what, adm.PreviousVersion, v)
		}
	case codeReplay:
		if err != nil || !adm.Replay {
			f.t.Fatalf("%s: %v (replay %v), want a replay of %s", what, err, adm.Replay, w.segID)
		}
		f.sameJSON(what+": replayed receipt", adm.Receipt, f.receipt(w.segID))
		if v := f.version(req.Target); adm.PreviousVersion != v {
			f.t.Fatalf("%s: replay's PreviousVersion = %q, want %q", what, adm.PreviousVersion, v)
		}
		f.noReceipt(req.ReceiptID)
	default:
		if err == nil {
			f.t.Fatalf("%s: admitted (replay %v), want %s", what, adm.Replay, w.seg)
		}
		wantCode(f.t, err, w.seg, w.segID)
		if adm.Receipt.ID != "" || adm.Replay || adm.PreviousVersion != "" {
			f.t.Fatalf("%s: refused (%s) with an admission %+v", what, w.seg, adm)
		}
		if idErr != nil {
			f.noReceipt(req.ReceiptID)
		}
	}
	p.steps = append(p.steps, canon(f.t, answer(adm, err))+"\n"+canon(f.t, f.snapshot(true)))
	return adm
}

// answer is a step's answer, in a comparable form.
func answer(adm fencegate.Admission, err error) any {
	out := map[string]any{"receipt": utc(adm.Receipt), "replay": adm.Replay,
		"previousVersion": adm.PreviousVersion, "err": ruling(err), "priorErr": ruling(adm.PriorErr)}
	if adm.Prior != nil {
		out["prior"] = utc(*adm.Prior)
	}
	return out
}

// ruling is an error's code and the receipt it names.
func ruling(err error) string {
	if err == nil {
		return ""
	}
	var id string
	if fe := (*fencegate.Error)(nil); errors.As(err, &fe) {
		id = fe.ReceiptID
	}
	return string(fencegate.ErrorCode(err)) + " " + id
}
