package storetest

import (
	"fmt"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
)

func pendingEffectMakesResourceBusy(f *fx) {
	w5, w6 := f.writer("res/a", 5), f.writer("res/a", 6)
	a := f.admit(w5.req(1, "a"))
	if row := f.resource("res/a"); row.PendingReceipt != a.Receipt.ID {
		f.t.Fatalf("PendingReceipt = %q, want %q", row.PendingReceipt, a.Receipt.ID)
	}
	f.reject(w5.req(2, "b"), fencegate.CodeResourceBusy, a.Receipt.ID)
	f.reject(w6.req(1, "c"), fencegate.CodeResourceBusy, a.Receipt.ID)
	f.reject(w5.req(3, "d"), fencegate.CodeResourceBusy, a.Receipt.ID)
	// Rejections and replays are still answered.
	f.reject(f.writer("res/a", 4).req(1, "x"), fencegate.CodeStaleOwner, "")
	f.replay(w5.req(1, "a"), a.Receipt.ID)
	// Another resource is not affected.
	f.admit(f.writer("res/b", 5).req(1, "a"))
	f.commit(a.Receipt.ID, "v1")
	f.admit(w5.req(2, "b"))
}

func unknownKeepsResourceBusyUntilSettled(f *fx) {
	w5, w6 := f.writer("res/a", 5), f.writer("res/a", 6)
	a := f.admit(w5.req(1, "a"))
	f.settle(a.Receipt.ID, unknown)
	f.reject(w5.req(2, "b"), fencegate.CodeResourceBusy, a.Receipt.ID)
	f.reject(w6.req(1, "c"), fencegate.CodeResourceBusy, a.Receipt.ID)
	f.replay(w5.req(1, "a"), a.Receipt.ID)
	f.settle(a.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1"})

	b := f.admit(w5.req(2, "b"))
	f.settle(b.Receipt.ID, unknown)
	f.reject(w5.req(3, "c"), fencegate.CodeResourceBusy, b.Receipt.ID)
	f.settle(b.Receipt.ID, notApplied) // gives segment 2 back
	if row := f.resource("res/a"); row.LastSegmentSeq != 1 || row.PendingReceipt != "" {
		f.t.Fatalf("after NOT_APPLIED: %+v", row)
	}
	f.reject(w5.req(3, "c"), fencegate.CodeSegmentOutOfOrder, "")
	c := f.admit(w5.req(2, "b-again"))
	f.settle(c.Receipt.ID, unknown)
	f.settle(c.Receipt.ID, failed)
	f.commit(f.admit(w5.req(2, "b-third")).Receipt.ID, "v2")
}

func failedSegmentCanBeRetried(f *fx) {
	w5, w6 := f.writer("res/a", 5), f.writer("res/a", 6)
	f.commit(f.admit(w5.req(1, "a")).Receipt.ID, "v1")
	b := f.admit(w5.req(2, "b"))
	f.settle(b.Receipt.ID, failed)
	if got := f.receipt(b.Receipt.ID); got.State != fencegate.ReceiptFailed || got.Error != failed.Error {
		f.t.Fatalf("failed receipt: %+v", got)
	}
	// The retry may carry another payload: the failed segment is not live.
	retry := f.admit(w5.req(2, "b2"))
	if retry.PreviousVersion != "v1" {
		f.t.Fatalf("PreviousVersion after a failed segment = %q, want v1", retry.PreviousVersion)
	}
	f.commit(retry.Receipt.ID, "v2")

	// A failed first segment of a new fence keeps the fence but frees segment 1.
	c := f.admit(w6.req(1, "c"))
	f.settle(c.Receipt.ID, failed)
	if row := f.resource("res/a"); row.HighestFence != 6 || row.LastSegmentSeq != 0 || row.Lease != "lease-6" {
		f.t.Fatalf("after failing segment 1 of fence 6: %+v", row)
	}
	f.reject(w5.req(3, "x"), fencegate.CodeStaleOwner, "")
	f.reject(w6.req(2, "x"), fencegate.CodeSegmentOutOfOrder, "")
	f.commit(f.admit(w6.req(1, "c")).Receipt.ID, "v3")
}

func committedVersionIsRecorded(f *fx) {
	w := f.writer("res/a", 5)
	a := f.admit(w.req(1, "a"))
	f.commit(a.Receipt.ID, "v1")
	b := f.admit(w.req(2, "b"))
	if b.PreviousVersion != "v1" {
		f.t.Fatalf("PreviousVersion = %q, want v1", b.PreviousVersion)
	}
	f.commit(b.Receipt.ID, "v2")

	child := *w
	child.target = "res/a/child"
	c := f.admit(child.req(3, "c"))
	if c.PreviousVersion != "" {
		f.t.Fatalf("PreviousVersion of another target = %q, want \"\"", c.PreviousVersion)
	}
	f.commit(c.Receipt.ID, "c1")
	if v := f.version("res/a"); v != "v2" {
		f.t.Fatalf("Version(res/a) = %q after a commit to another target", v)
	}
	// UNKNOWN and FAILED record no version, even when one is given.
	d := f.admit(w.req(4, "d"))
	f.settle(d.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptUnknown, Version: "maybe"})
	f.settle(d.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptFailed})
	e := f.admit(w.req(4, "e"))
	f.settle(e.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptFailed, Version: "nope"})
	if v := f.version("res/a"); v != "v2" {
		f.t.Fatalf("Version(res/a) = %q after UNKNOWN/FAILED, want v2", v)
	}
	g := f.admit(w.req(4, "g"))
	if g.PreviousVersion != "v2" {
		f.t.Fatalf("PreviousVersion = %q, want v2", g.PreviousVersion)
	}
	f.settle(g.Receipt.ID, unknown)
	f.commit(g.Receipt.ID, "v4")
}

func deleteForgetsVersion(f *fx) {
	w := f.writer("res/a", 5)
	f.commit(f.admit(w.req(1, "a")).Receipt.ID, "v1")
	del := *w
	del.method = "DELETE"
	d := f.admit(del.req(2, "delete"))
	if d.PreviousVersion != "v1" {
		f.t.Fatalf("PreviousVersion of the delete = %q, want v1", d.PreviousVersion)
	}
	f.commit(d.Receipt.ID, "")
	if v := f.version("res/a"); v != "" {
		f.t.Fatalf("Version after a delete = %q, want \"\"", v)
	}
	if c := f.admit(w.req(3, "c")); c.PreviousVersion != "" {
		f.t.Fatalf("PreviousVersion after a delete = %q, want \"\"", c.PreviousVersion)
	}
}

func settleRejectsIllegalTransitions(f *fx) {
	w := f.writer("res/a", 5)
	a := f.admit(w.req(1, "a")).Receipt.ID
	for _, to := range []fencegate.ReceiptState{fencegate.ReceiptPending, "BOGUS", ""} {
		f.settleFails(a, fencegate.Outcome{State: to}, fencegate.CodeInvalidRequest)
	}
	done := f.commit(a, "v1")
	// The same terminal state with the same version is an idempotent repeat.
	again, err := f.s.Settle(f.ctx, a, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1", Now: f.tick()})
	if err != nil {
		f.t.Fatalf("repeating COMMITTED v1: %v", err)
	}
	f.sameJSON("repeated settle", again, done)
	f.sameJSON("receipt after repeated settle", f.receipt(a), done)
	for _, o := range []fencegate.Outcome{
		{State: fencegate.ReceiptCommitted, Version: "v2"},
		{State: fencegate.ReceiptFailed}, {State: fencegate.ReceiptUnknown},
		{State: fencegate.ReceiptNotApplied}, {State: fencegate.ReceiptPending},
	} {
		f.settleFails(a, o, fencegate.CodeReceiptSettled)
	}

	b := f.admit(w.req(2, "b")).Receipt.ID
	f.settle(b, unknown)
	f.settleFails(b, fencegate.Outcome{State: fencegate.ReceiptPending}, fencegate.CodeInvalidRequest)
	f.settle(b, notApplied)
	if _, err := f.s.Settle(f.ctx, b, fencegate.Outcome{State: fencegate.ReceiptNotApplied, Now: f.tick()}); err != nil {
		f.t.Fatalf("repeating NOT_APPLIED: %v", err)
	}
	f.settleFails(b, committed, fencegate.CodeReceiptSettled)
	f.settleFails(b, failed, fencegate.CodeReceiptSettled)

	c := f.admit(w.req(2, "c")).Receipt.ID
	f.settle(c, failed)
	if _, err := f.s.Settle(f.ctx, c, fencegate.Outcome{State: fencegate.ReceiptFailed, Now: f.tick()}); err != nil {
		f.t.Fatalf("repeating FAILED: %v", err)
	}
	f.settleFails(c, committed, fencegate.CodeReceiptSettled)
	f.settleFails(c, unknown, fencegate.CodeReceiptSettled)
	f.settleFails("rcpt-none", committed, fencegate.CodeNotFound)
}

// finalStateNeverChanges: a settle that finds a final state other than its
// own is RECEIPT_SETTLED and changes nothing, also when the two race (a
// queued FAILED retry against another replica's resend that committed, a
// background resend against an operator's verdict): exactly one of them
// wins, and the stored state is the winner's.
func finalStateNeverChanges(f *fx) {
	w := f.writer("res/race", 5)
	id := f.admit(w.req(1, "a")).Receipt.ID
	f.settle(id, unknown)
	f.commit(id, "v1")
	f.settleFails(id, failed, fencegate.CodeReceiptSettled)
	f.settleFails(id, notApplied, fencegate.CodeReceiptSettled)
	if got := f.receipt(id); got.State != fencegate.ReceiptCommitted || got.Version != "v1" {
		f.t.Fatalf("receipt after late settles: %s %q, want COMMITTED v1", got.State, got.Version)
	}

	rivals := []fencegate.Outcome{
		{State: fencegate.ReceiptCommitted, Version: "v2"}, failed, notApplied,
	}
	seg := uint64(2)
	for round := range 10 {
		id := f.admit(w.req(seg, fmt.Sprint("p", round))).Receipt.ID
		f.settle(id, unknown)
		errs := make([]error, len(rivals))
		var wg sync.WaitGroup
		for i, o := range rivals {
			o.Now = f.tick()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = f.s.Settle(f.ctx, id, o)
			}()
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				f.t.Fatalf("segment %d: both %s and %s settled", seg, rivals[winner].State, rivals[i].State)
			case err == nil:
				winner = i
			case fencegate.ErrorCode(err) != fencegate.CodeReceiptSettled:
				f.t.Fatalf("segment %d: losing settle %s: %v, want RECEIPT_SETTLED", seg, rivals[i].State, err)
			}
		}
		if winner < 0 {
			f.t.Fatalf("segment %d: no settle won: %v", seg, errs)
		}
		if got := f.receipt(id); got.State != rivals[winner].State {
			f.t.Fatalf("segment %d: stored %s, but %s won", seg, got.State, rivals[winner].State)
		}
		if rivals[winner].State == fencegate.ReceiptCommitted {
			seg++ // else the segment number was given back and is admitted again
		}
	}
}

// unknownKeepsRetryAt: an UNKNOWN outcome with RetryAfter (the upstream's
// "in progress, retry later") is kept as RetryAt = Now + RetryAfter, capped at
// MaxRetryAfter; the next outcome without one clears it; a final state keeps none.
func unknownKeepsRetryAt(f *fx) {
	w := f.writer("res/retry", 5)
	id := f.admit(w.req(1, "a")).Receipt.ID
	now := f.tick()
	got, err := f.s.Settle(f.ctx, id, fencegate.Outcome{State: fencegate.ReceiptUnknown, Resend: true, RetryAfter: 30 * time.Second, Now: now})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range []fencegate.Receipt{got, f.receipt(id)} {
		if r.RetryAt == nil || !r.RetryAt.Equal(now.Add(30*time.Second)) {
			f.t.Fatalf("RetryAt = %v, want %v", r.RetryAt, now.Add(30*time.Second))
		}
	}
	now = f.tick()
	if _, err := f.s.Settle(f.ctx, id, fencegate.Outcome{State: fencegate.ReceiptUnknown, Resend: true, RetryAfter: 24 * time.Hour, Now: now}); err != nil {
		f.t.Fatal(err)
	}
	if r := f.receipt(id); r.RetryAt == nil || !r.RetryAt.Equal(now.Add(fencegate.MaxRetryAfter)) {
		f.t.Fatalf("RetryAt = %v, want capped at %v", r.RetryAt, now.Add(fencegate.MaxRetryAfter))
	}
	if _, err := f.s.Settle(f.ctx, id, fencegate.Outcome{State: fencegate.ReceiptUnknown, Resend: true, Attempts: 1, Now: f.tick()}); err != nil {
		f.t.Fatal(err)
	}
	if r := f.receipt(id); r.RetryAt != nil {
		f.t.Fatalf("RetryAt = %v after an answer without Retry-After, want none", r.RetryAt)
	}
	if _, err := f.s.Settle(f.ctx, id, fencegate.Outcome{State: fencegate.ReceiptUnknown, RetryAfter: time.Minute, Now: f.tick()}); err != nil {
		f.t.Fatal(err)
	}
	if r := f.commit(id, "v1"); r.RetryAt != nil {
		f.t.Fatalf("a COMMITTED receipt keeps RetryAt %v", r.RetryAt)
	}
}

// ifPendingSettlesOnlyAnUntouchedReceipt: a settle with IfPending applies
// to a receipt still PENDING and never settled or claimed since its
// admission; once anything settled it (UNKNOWN, a resend's claim) it is
// STILL_RECONCILING and the receipt is unchanged.
func ifPendingSettlesOnlyAnUntouchedReceipt(f *fx) {
	w := f.writer("res/ifpending", 5)
	id := f.admit(w.req(1, "a")).Receipt.ID
	if _, err := f.s.Settle(f.ctx, id, fencegate.Outcome{State: fencegate.ReceiptUnknown, Resend: true, Now: f.tick()}); err != nil {
		f.t.Fatal(err)
	}
	before := f.receipt(id)
	_, err := f.s.Settle(f.ctx, id, fencegate.Outcome{State: fencegate.ReceiptNotApplied, IfPending: true, Now: f.tick()})
	wantCode(f.t, err, fencegate.CodeStillReconciling, "")
	f.sameJSON("receipt after a refused IfPending settle", f.receipt(id), before)
	w2 := f.writer("res/ifpending2", 5)
	id2 := f.admit(w2.req(1, "a")).Receipt.ID
	r, err := f.s.Settle(f.ctx, id2, fencegate.Outcome{State: fencegate.ReceiptNotApplied, IfPending: true, Now: f.tick()})
	if err != nil || r.State != fencegate.ReceiptNotApplied {
		f.t.Fatalf("IfPending settle of an untouched PENDING receipt: %+v, %v", r, err)
	}
}
