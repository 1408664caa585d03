package storetest

import (
	"time"

	"github.com/fencegate/fencegate"
)

// priorIsAppliedBeforeTheSegment: the prior settle runs first, so the
// pending mark it clears does not make the next segment RESOURCE_BUSY and the
// admission's PreviousVersion is the version it just recorded; an UNKNOWN
// prior keeps the mark, so the segment is busy but the prior still commits
// (with its attempt, Resend and RetryAt).
func priorIsAppliedBeforeTheSegment(f *fx) {
	runPriors(f, func(f *fx, p *priors) {
		w5, w6 := f.writer("res/a", 5), f.writer("res/a", 6)
		a := f.admit(w5.req(1, "a"))
		b := p.admit(w5.req(2, "b"), a.Receipt.ID, committedAt("v1"), want{})
		if b.PreviousVersion != "v1" || b.Prior.State != fencegate.ReceiptCommitted || b.Prior.Version != "v1" {
			f.t.Fatalf("segment 2 on its prior: previous version %q, prior %s %q", b.PreviousVersion, b.Prior.State, b.Prior.Version)
		}
		c := p.admit(w6.req(1, "c"), b.Receipt.ID, committedAt("v2"), want{})
		if c.PreviousVersion != "v2" {
			f.t.Fatalf("a new fence on its prior: previous version %q, want v2", c.PreviousVersion)
		}
		// A delete's COMMITTED "" forgets the version.
		if d := p.admit(w6.req(2, "d"), c.Receipt.ID, committedAt(""), want{}); d.PreviousVersion != "" {
			f.t.Fatalf("after a prior delete: previous version %q, want none", d.PreviousVersion)
		}
		d := f.receipt(f.resource("res/a").PendingReceipt)
		e := p.admit(w6.req(3, "e"), d.ID, fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: "timeout", Attempts: 1,
			Resend: true, RetryAfter: 30 * time.Second}, want{seg: fencegate.CodeResourceBusy, segID: d.ID})
		if e.Prior.State != fencegate.ReceiptUnknown || e.Prior.Attempts != 1 || !e.Prior.Resend || e.Prior.RetryAt == nil {
			f.t.Fatalf("UNKNOWN prior: %s with %d attempts, resend %v, retry at %v", e.Prior.State, e.Prior.Attempts, e.Prior.Resend, e.Prior.RetryAt)
		}
		if row := f.resource("res/a"); row.PendingReceipt != d.ID {
			f.t.Fatalf("an UNKNOWN prior cleared the pending mark: %+v", row)
		}
		if g := p.admit(w6.req(3, "e"), d.ID, committedAt("v4"), want{}); g.PreviousVersion != "v4" {
			f.t.Fatalf("previous version %q, want v4", g.PreviousVersion)
		}
	})
}

// priorCommitsWhateverTheSegmentsVerdict: a refused segment (stale, out of
// order, quarantined, a regression, busy on another pending receipt, a
// target of another resource) does not undo its prior: the receipt is
// settled, the version recorded and the pending mark cleared, so the next
// admission is not busy.
func priorCommitsWhateverTheSegmentsVerdict(f *fx) {
	runPriors(f, func(f *fx, p *priors) {
		w5, w3 := f.writer("res/a", 5), f.writer("res/a", 3)
		a := f.admit(w5.req(1, "a"))
		p.admit(w3.req(1, "x"), a.Receipt.ID, committedAt("v1"), want{seg: fencegate.CodeStaleOwner})
		b := f.admit(w5.req(2, "b"))
		p.admit(w5.req(4, "x"), b.Receipt.ID, committedAt("v2"), want{seg: fencegate.CodeSegmentOutOfOrder})
		c := f.admit(w5.req(3, "c"))
		p.admit(w5.req(3, "other"), c.Receipt.ID, committedAt("v3"), want{seg: fencegate.CodeQuarantined, segID: c.Receipt.ID})
		if q := f.quarantined("res/a"); len(q) != 1 || q[0].ReceiptID != c.Receipt.ID || q[0].PayloadDigest != "sha256:other" {
			f.t.Fatalf("quarantine after a quarantined segment with a prior: %+v", q)
		}
		d := f.admit(w5.req(4, "d"))
		other := f.writer("res/a", 5)
		other.g.Lease = "lease-other"
		p.admit(other.req(5, "x"), d.Receipt.ID, committedAt("v4"), want{seg: fencegate.CodeFenceRegression})
		e := f.admit(w5.req(5, "e"))
		// Busy on its own pending receipt while the prior settles another resource's.
		wb := f.writer("res/b", 5)
		pb := f.admit(wb.req(1, "p"))
		p.admit(w5.req(6, "f"), pb.Receipt.ID, committedAt("b1"), want{seg: fencegate.CodeResourceBusy, segID: e.Receipt.ID})
		if row := f.resource("res/b"); row.PendingReceipt != "" {
			f.t.Fatalf("the prior of res/b left it pending: %+v", row)
		}
		mismatch := f.writer("res/a", 5)
		mismatch.target = "res/b"
		p.admit(mismatch.req(6, "m"), e.Receipt.ID, committedAt("v5"), want{seg: fencegate.CodeResourceMismatch})
		f.admit(w5.req(6, "f"))
		f.admit(wb.req(2, "q"))
	})
}

// replayWithAPrior: a replay is answered on the state the prior left: the
// client's retry of a write whose settle is folded into it gets the receipt
// as settled, and a replay beside another receipt's prior commits that prior.
func replayWithAPrior(f *fx) {
	runPriors(f, func(f *fx, p *priors) {
		w := f.writer("res/a", 5)
		a := f.admit(w.req(1, "a"))
		r := p.admit(w.req(1, "a"), a.Receipt.ID, committedAt("v1"), want{seg: codeReplay, segID: a.Receipt.ID})
		if r.Receipt.State != fencegate.ReceiptCommitted || r.PreviousVersion != "v1" {
			f.t.Fatalf("replay on its own prior: %s, previous version %q; want COMMITTED, v1", r.Receipt.State, r.PreviousVersion)
		}
		b := f.admit(w.req(2, "b"))
		p.admit(w.req(1, "a"), b.Receipt.ID, committedAt("v2"), want{seg: codeReplay, segID: a.Receipt.ID})
		c := f.admit(w.req(3, "c"))
		p.admit(w.req(3, "c"), c.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptUnknown, Attempts: 1},
			want{seg: codeReplay, segID: c.Receipt.ID})
	})
}

// refusedPriorChangesNothing: a prior the settle rules refuse
// (RECEIPT_SETTLED, NOT_FOUND, INVALID_REQUEST, STILL_RECONCILING) changes
// nothing and the segment is decided as if it had not been given; a repeat
// of a final settle is no refusal, it answers the receipt as it is.
func refusedPriorChangesNothing(f *fx) {
	runPriors(f, func(f *fx, p *priors) {
		w := f.writer("res/a", 5)
		a := f.commit(f.admit(w.req(1, "a")).Receipt.ID, "v1")
		b := p.admit(w.req(2, "b"), a.ID, committedAt("v9"), want{prior: fencegate.CodeReceiptSettled})
		if b.PreviousVersion != "v1" {
			f.t.Fatalf("after a refused prior: previous version %q, want v1", b.PreviousVersion)
		}
		p.admit(w.req(2, "b"), a.ID, committedAt("v1"), want{seg: codeReplay, segID: b.Receipt.ID})
		busy := want{seg: fencegate.CodeResourceBusy, segID: b.Receipt.ID}
		busy.prior = fencegate.CodeNotFound
		p.admit(w.req(3, "c"), "rcpt-none", committedAt("x"), busy)
		busy.prior = fencegate.CodeInvalidRequest
		p.admit(w.req(3, "c"), b.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptPending}, busy)
		u := f.settle(b.Receipt.ID, unknown)
		busy.prior = fencegate.CodeStillReconciling
		stale := fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v2", IfSettledAt: u.SettledAt.Add(-time.Millisecond)}
		p.admit(w.req(3, "c"), b.Receipt.ID, stale, busy)
		current := fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v2", IfSettledAt: *u.SettledAt}
		if c := p.admit(w.req(3, "c"), b.Receipt.ID, current, want{}); c.PreviousVersion != "v2" {
			f.t.Fatalf("previous version %q, want v2", c.PreviousVersion)
		}
	})
}

// priorOfAnotherResourceOrTarget: the prior may settle a receipt of another
// target (its version is recorded there, the admission chains on its own) or
// of another resource (whose pending mark and segment it settles).
func priorOfAnotherResourceOrTarget(f *fx) {
	runPriors(f, func(f *fx, p *priors) {
		w := f.writer("res/a", 5)
		child := *w
		child.target = "res/a/child"
		a := f.admit(child.req(1, "a"))
		if b := p.admit(w.req(2, "b"), a.Receipt.ID, committedAt("c1"), want{}); b.PreviousVersion != "" {
			f.t.Fatalf("previous version of res/a after its child's prior: %q, want none", b.PreviousVersion)
		}
		if v := f.version("res/a/child"); v != "c1" {
			f.t.Fatalf("version of the prior's target: %q, want c1", v)
		}
		f.commit(f.resource("res/a").PendingReceipt, "v2")
		o := f.writer("res/b", 7)
		ob := f.admit(o.req(1, "x"))
		c := p.admit(w.req(3, "c"), ob.Receipt.ID, committedAt("b1"), want{})
		if c.PreviousVersion != "v2" {
			f.t.Fatalf("previous version %q beside another resource's prior, want v2", c.PreviousVersion)
		}
		ob2 := f.admit(o.req(2, "y"))
		p.admit(w.req(4, "d"), ob2.Receipt.ID, failed, want{seg: fencegate.CodeResourceBusy, segID: c.Receipt.ID})
		if row := f.resource("res/b"); row.LastSegmentSeq != 1 || row.PendingReceipt != "" {
			f.t.Fatalf("res/b after its FAILED prior: %+v", row)
		}
		f.admit(o.req(2, "y2"))
	})
}

// failedOrNotAppliedPriorGivesTheSegmentBack: a FAILED or NOT_APPLIED prior
// gives its segment number back before the segment is decided, so the retry
// of that segment is admitted in the same commit (and the next one is out of
// order); for segment 1 of a new fence the fence is kept.
func failedOrNotAppliedPriorGivesTheSegmentBack(f *fx) {
	runPriors(f, func(f *fx, p *priors) {
		w5, w6 := f.writer("res/a", 5), f.writer("res/a", 6)
		f.commit(f.admit(w5.req(1, "a")).Receipt.ID, "v1")
		b := f.admit(w5.req(2, "b"))
		b2 := p.admit(w5.req(2, "b2"), b.Receipt.ID, failed, want{})
		if b2.PreviousVersion != "v1" {
			f.t.Fatalf("retry on its FAILED prior: previous version %q, want v1", b2.PreviousVersion)
		}
		f.settle(b2.Receipt.ID, unknown)
		b3 := p.admit(w5.req(2, "b3"), b2.Receipt.ID, notApplied, want{})
		p.admit(w5.req(3, "x"), b3.Receipt.ID, failed, want{seg: fencegate.CodeSegmentOutOfOrder})
		c := f.admit(w6.req(1, "c"))
		c2 := p.admit(w6.req(1, "c2"), c.Receipt.ID, failed, want{})
		if row := f.resource("res/a"); row.HighestFence != 6 || row.LastSegmentSeq != 1 || row.Lease != "lease-6" {
			f.t.Fatalf("after segment 1 of fence 6 again on its FAILED prior: %+v", row)
		}
		p.admit(w5.req(2, "x"), c2.Receipt.ID, committedAt("v6"), want{seg: fencegate.CodeStaleOwner})
	})
}
