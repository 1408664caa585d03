package storetest

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate"
)

// priorIsDecidedOnlyWithAVerdict: an Admit that answers no verdict on its
// segment (an invalid request a store refuses before its transaction, an
// ended context) either left everything as it was, with a zero Admission,
// or committed both the prior and the segment; an Admission that carries the
// prior's answer means the prior committed. Some stores find a receipt ID in
// use only in the database: that refusal too leaves the prior applied (and
// said so) or nothing.
func priorIsDecidedOnlyWithAVerdict(f *fx) {
	f.needPrior()
	w := f.writer("res/a", 5)
	a := f.admit(w.req(1, "a")).Receipt.ID
	withPrior := func(req fencegate.AdmitRequest) fencegate.AdmitRequest {
		req.Prior = &fencegate.PriorSettle{ReceiptID: a, Outcome: fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1", Now: req.Now}}
		return req
	}
	// bothOrNothing checks the store after an answer without a segment verdict.
	bothOrNothing := func(what string, adm fencegate.Admission, req fencegate.AdmitRequest, before snapshot) (applied bool) {
		f.t.Helper()
		if adm.Receipt.ID != "" || adm.Replay || adm.PriorErr != nil {
			f.t.Fatalf("%s: answered %+v", what, adm)
		}
		if adm.Prior == nil && canon(f.t, f.snapshot(true)) == canon(f.t, before) {
			return false
		}
		r := f.receipt(a)
		if r.State != fencegate.ReceiptCommitted || r.Version != "v1" || f.version("res/a") != "v1" {
			f.t.Fatalf("%s: the store changed, but the prior is %s %q", what, r.State, r.Version)
		}
		if adm.Prior != nil {
			f.sameJSON(what+": prior's receipt", *adm.Prior, r)
		}
		return true
	}

	req := withPrior(w.req(2, "b"))
	req.Method = ""
	before := f.snapshot(true)
	adm, err := f.s.Admit(f.ctx, req)
	wantCode(f.t, err, fencegate.CodeInvalidRequest, "")
	if bothOrNothing("an invalid admission", adm, req, before) {
		f.noReceipt(req.ReceiptID)
		if row := f.resource("res/a"); row.PendingReceipt != "" {
			f.t.Fatalf("an applied prior left the resource pending: %+v", row)
		}
		return // the prior is settled; the rest needs it pending
	}

	req = withPrior(w.req(2, "b"))
	req.ReceiptID = a
	before = f.snapshot(true)
	adm, err = f.s.Admit(f.ctx, req)
	wantCode(f.t, err, fencegate.CodeInvalidRequest, "")
	if bothOrNothing("a receipt ID in use", adm, req, before) {
		if row := f.resource("res/a"); row.PendingReceipt != "" || row.LastSegmentSeq != 1 {
			f.t.Fatalf("after the prior of a refused admission: %+v", row)
		}
		return
	}

	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	req = withPrior(w.req(2, "b"))
	before = f.snapshot(true)
	adm, err = f.s.Admit(ctx, req)
	if err == nil {
		if adm.Prior == nil || adm.Prior.State != fencegate.ReceiptCommitted {
			f.t.Fatalf("admitted under an ended context with prior %+v, %v", adm.Prior, adm.PriorErr)
		}
		f.admitted(req, adm)
		return
	}
	if fencegate.ErrorCode(err) == fencegate.CodeResourceBusy {
		f.t.Fatalf("an ended context: %v (the prior was not applied first)", err)
	}
	if bothOrNothing("an ended context", adm, req, before) {
		f.admitted(req, fencegate.Admission{Receipt: f.receipt(req.ReceiptID)})
	}
}

// concurrentPriorsAreIsolated fires admissions carrying priors on many
// resources at once (as group commit batches them), mixed with refusals and
// with a member that reuses a receipt ID (which some stores learn only from
// the database, re-running the batch member by member): every prior is
// applied exactly once (an UNKNOWN prior adding one attempt shows it), and
// every member is answered as if it had run alone.
func concurrentPriorsAreIsolated(f *fx) {
	f.needPrior()
	const n = 16
	type call struct {
		req  fencegate.AdmitRequest
		want fencegate.Code // "" admitted
		of   string         // the receipt the prior settles ("" none)
		adm  fencegate.Admission
		err  error
	}
	var calls []*call
	firsts := make([]string, n)
	for i := range n {
		w := f.writer(fmt.Sprintf("res/prior-%02d", i), 5)
		firsts[i] = f.admit(w.req(1, "one")).Receipt.ID
		c := &call{req: w.req(2, "two"), of: firsts[i]}
		o := fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: fmt.Sprintf("v1-%d", i), Now: c.req.Now}
		switch i % 4 {
		case 1:
			o = fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: "timeout", Attempts: 1, Now: c.req.Now}
			c.want = fencegate.CodeResourceBusy
		case 2:
			c.req = f.writer(w.g.Resource, 3).req(1, "stale")
			c.want = fencegate.CodeStaleOwner
		case 3: // settled first, so the receipt ID is what refuses it
			f.commit(firsts[i], "v1")
			c.req.ReceiptID, c.of, c.want = firsts[0], "", fencegate.CodeInvalidRequest
		}
		if c.of != "" {
			c.req.Prior = &fencegate.PriorSettle{ReceiptID: c.of, Outcome: o}
		}
		calls = append(calls, c)
	}
	// A member whose prior is of another resource than its admission.
	x := f.admit(f.writer("res/prior-x", 5).req(1, "x")).Receipt.ID
	y := &call{req: f.writer("res/prior-y", 5).req(1, "y"), of: x}
	y.req.Prior = &fencegate.PriorSettle{ReceiptID: x, Outcome: fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "vx", Now: y.req.Now}}
	calls = append(calls, y)

	together(len(calls), func(i int) { calls[i].adm, calls[i].err = f.s.Admit(f.ctx, calls[i].req) })

	for i, c := range calls {
		res := c.req.Grant.Resource
		if c.want == "" {
			if c.err != nil {
				f.t.Fatalf("member %d (%s): %v", i, res, c.err)
			}
			f.admitted(c.req, c.adm)
			if v := f.version(c.req.Target); c.adm.PreviousVersion != v {
				f.t.Fatalf("member %d: PreviousVersion %q, want %q (the version its prior left)", i, c.adm.PreviousVersion, v)
			}
		} else {
			wantCode(f.t, c.err, c.want, "")
		}
		if c.of == "" {
			if c.adm.Prior != nil || c.adm.PriorErr != nil {
				f.t.Fatalf("member %d without a prior answered one: %+v", i, c.adm)
			}
			if row := f.resource(res); row.PendingReceipt != "" || row.LastSegmentSeq != 1 {
				f.t.Fatalf("member %d refused without a prior changed %s: %+v", i, res, row)
			}
			continue
		}
		if c.adm.Prior == nil {
			f.t.Fatalf("member %d (%s): prior %s not answered: %v", i, res, c.of, c.adm.PriorErr)
		}
		want := c.req.Prior.Outcome
		stored := f.receipt(c.of)
		f.sameJSON(fmt.Sprintf("member %d: prior", i), *c.adm.Prior, stored)
		if stored.State != want.State || stored.Version != want.Version || stored.Attempts != want.Attempts {
			f.t.Fatalf("member %d: prior %s is %s %q with %d attempts, want %s %q with %d (applied once)",
				i, c.of, stored.State, stored.Version, stored.Attempts, want.State, want.Version, want.Attempts)
		}
		priorRes := stored.Resource
		row := f.resource(priorRes)
		switch {
		case want.State == fencegate.ReceiptUnknown && row.PendingReceipt != c.of:
			f.t.Fatalf("member %d: an UNKNOWN prior freed %s: %+v", i, priorRes, row)
		case want.State == fencegate.ReceiptCommitted && c.want != "" && row.PendingReceipt != "":
			f.t.Fatalf("member %d: a COMMITTED prior left %s pending: %+v", i, priorRes, row)
		}
		if want.State == fencegate.ReceiptCommitted {
			if v := f.version(stored.Target); v != want.Version {
				f.t.Fatalf("member %d: version of %s = %q, want %q", i, stored.Target, v, want.Version)
			}
		}
	}
}
