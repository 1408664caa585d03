package storetest

import (
	"slices"

	"github.com/fencegate/fencegate"
)

// The retention of quarantine records (fencegate.Compactor's
// CompactQuarantine; README, "Retention").

// compactor is the store's fencegate.Compactor; every store implements it.
func (f *fx) compactor() fencegate.Compactor {
	f.t.Helper()
	c, ok := f.s.(fencegate.Compactor)
	if !ok {
		f.t.Fatal("the store does not implement fencegate.Compactor")
	}
	return c
}

// noQuarantineRecord requires QuarantineRecord(id) to be NOT_FOUND.
func (f *fx) noQuarantineRecord(id string) {
	f.t.Helper()
	_, err := f.s.QuarantineRecord(f.ctx, id)
	wantCode(f.t, err, fencegate.CodeNotFound, "")
}

// quarantineCompactionDeletesRecordsLastAttemptedBeforeTheAge: records
// whose last attempt is before the cutoff go, at most limit per call, from
// both lists and from QuarantineRecord; a record first seen before the
// cutoff but hit again since stays, and so do records first seen after it.
// Fence state, receipts, versions and the kept records do not change; a
// replay is answered as before, and the same refused request again makes a
// new record (Attempts 1).
func quarantineCompactionDeletesRecordsLastAttemptedBeforeTheAge(f *fx) {
	c := f.compactor()
	a := f.writer("res/a", 5)
	a1 := f.commit(f.admit(a.req(1, "a1")).Receipt.ID, "va1").ID
	a2 := f.commit(f.admit(a.req(2, "a2")).Receipt.ID, "va2").ID
	old1 := f.quarantine(a.req(1, "x"), a1)
	old2 := f.quarantine(a.req(1, "y"), a1)
	f.quarantine(a.req(1, "y"), a1) // hit again, still before the cutoff
	hit := f.quarantine(a.req(2, "z"), a2)
	b := f.writer("res/b", 7)
	b1 := f.commit(f.admit(b.req(1, "b1")).Receipt.ID, "vb1").ID
	old3 := f.quarantine(b.req(1, "other"), b1)

	cutoff := f.tick()
	hit = f.quarantine(a.req(2, "z"), a2) // first seen before the cutoff, last after it
	young := f.quarantine(a.req(1, "w"), a1)
	if hit.Attempts != 2 || !hit.At.Before(cutoff) || hit.LastAt.Before(cutoff) {
		f.t.Fatalf("record hit again after the cutoff: %+v", hit)
	}

	before := f.snapshot(true)
	n1, err := c.CompactQuarantine(f.ctx, cutoff, 1)
	if err != nil || n1 != 1 {
		f.t.Fatalf("CompactQuarantine(limit 1) = %d, %v; want 1", n1, err)
	}
	n2, err := c.CompactQuarantine(f.ctx, cutoff, 100)
	if err != nil || n1+n2 != 3 {
		f.t.Fatalf("CompactQuarantine deleted %d+%d, %v; want 3 (%s %s %s)", n1, n2, err, old1.ID, old2.ID, old3.ID)
	}
	if n, err := c.CompactQuarantine(f.ctx, cutoff, 100); err != nil || n != 0 {
		f.t.Fatalf("CompactQuarantine again = %d, %v; want 0", n, err)
	}

	for _, q := range []fencegate.Quarantine{old1, old2, old3} {
		f.noQuarantineRecord(q.ID)
	}
	for _, q := range []fencegate.Quarantine{hit, young} {
		got, err := f.s.QuarantineRecord(f.ctx, q.ID)
		if err != nil {
			f.t.Fatalf("QuarantineRecord(%s) of a kept record: %v", q.ID, err)
		}
		f.sameJSON("kept quarantine record", got, q)
	}
	keep := func(q fencegate.Quarantine) bool { return q.ID == hit.ID || q.ID == young.ID }
	kept := slices.DeleteFunc(slices.Clone(before.Quarantine), func(q fencegate.Quarantine) bool { return !keep(q) })
	f.sameJSON("quarantine list after compaction", f.quarantined(""), kept)
	f.sameJSON("quarantine list of res/a in pages of 1", f.quarantinedBy("res/a", 1), kept)
	f.sameJSON("quarantine list of res/b", f.quarantined("res/b"), []fencegate.Quarantine{})
	after := f.snapshot(false)
	before.Quarantine = nil
	f.sameJSON("store but quarantine after quarantine compaction", after, before)

	// The fence rules answer as before; the refused request again is a new record.
	f.replay(a.req(1, "a1"), a1)
	f.replay(b.req(1, "b1"), b1)
	if again := f.quarantine(a.req(1, "x"), a1); again.Attempts != 1 || again.At.Before(cutoff) {
		f.t.Fatalf("the deleted record's request again: %+v, want a new record", again)
	}
	f.quarantine(b.req(1, "other"), b1)
	f.admit(a.req(3, "a3"))
}

// quarantineCompactionFreesTheReceiptsItPinned: a receipt a quarantine
// record names is kept by CompactReceipts; once CompactQuarantine has
// deleted every record naming it, the next CompactReceipts deletes it if
// the receipt rules otherwise allow (settled before the cutoff, not the
// last accepted segment, not the one before a pending segment), and keeps
// it otherwise. A quarantine pass changes no fence state and no receipt.
func quarantineCompactionFreesTheReceiptsItPinned(f *fx) {
	c := f.compactor()
	a := f.writer("res/a", 5)
	a1 := f.commit(f.admit(a.req(1, "a1")).Receipt.ID, "va1").ID
	a2 := f.commit(f.admit(a.req(2, "a2")).Receipt.ID, "va2").ID
	a3 := f.commit(f.admit(a.req(3, "a3")).Receipt.ID, "va3").ID // last accepted
	f.quarantine(a.req(1, "x"), a1)
	f.quarantine(a.req(1, "y"), a1)
	pinned2 := f.quarantine(a.req(2, "x"), a2) // hit again after the cutoff: keeps a2
	f.quarantine(a.req(3, "x"), a3)
	p := f.writer("res/p", 5)
	p1 := f.commit(f.admit(p.req(1, "p1")).Receipt.ID, "vp1").ID // before a PENDING segment
	f.quarantine(p.req(1, "x"), p1)
	p2 := f.admit(p.req(2, "p2")).Receipt.ID

	cutoff := f.tick()
	f.quarantine(a.req(2, "x"), a2)
	if n, err := c.CompactReceipts(f.ctx, cutoff, 100); err != nil || n != 0 {
		f.t.Fatalf("CompactReceipts with every old receipt pinned or kept = %d, %v; want 0", n, err)
	}

	before := f.snapshot(false)
	if n, err := c.CompactQuarantine(f.ctx, cutoff, 100); err != nil || n != 4 {
		f.t.Fatalf("CompactQuarantine = %d, %v; want the 4 records last attempted before the cutoff", n, err)
	}
	f.sameJSON("fence state, receipts and versions after a quarantine pass", f.snapshot(false), before)
	if got := f.quarantined(""); len(got) != 1 || got[0].ID != pinned2.ID {
		f.t.Fatalf("quarantine after compaction: %+v, want only %s", got, pinned2.ID)
	}

	if n, err := c.CompactReceipts(f.ctx, cutoff, 100); err != nil || n != 1 {
		f.t.Fatalf("CompactReceipts after the quarantine pass = %d, %v; want 1 (%s)", n, err, a1)
	}
	f.noReceipt(a1)
	for _, id := range []string{a2, a3, p1, p2} {
		f.receipt(id)
	}
	if rows := f.snapshot(false).Resources; canon(f.t, rows) != canon(f.t, before.Resources) {
		f.t.Fatalf("fence state after the receipt pass: %s, want %s", canon(f.t, rows), canon(f.t, before.Resources))
	}
	// The freed segment's replay and another payload for it are both
	// refused now, changing nothing; the kept ones answer as before.
	f.reject(a.req(1, "a1"), fencegate.CodeSegmentOutOfOrder, "")
	f.reject(a.req(1, "x"), fencegate.CodeSegmentOutOfOrder, "")
	f.replay(a.req(3, "a3"), a3)
	f.quarantine(a.req(2, "x"), a2)
	f.quarantine(a.req(3, "x"), a3)
	f.admit(a.req(4, "a4"))
}
