package storetest

import (
	"slices"

	"github.com/fencegate/fencegate"
)

// compactionKeepsWhatRulesAndReplaysNeed settles receipts of every kind, then
// compacts those settled before a cutoff: settled receipts go (from every
// lookup and list, at most limit per call), while PENDING and UNKNOWN ones, a
// resource's last accepted segment (and the one before it while a receipt is
// pending: compactionKeepsTheSegmentAGiveBackMakesLast), a receipt a
// quarantine record names and everything settled after the cutoff stay. Fence state, versions and
// quarantine records do not change; a compacted segment's replay is refused
// without a change, and the next segment is admitted on the kept version.
func compactionKeepsWhatRulesAndReplaysNeed(f *fx) {
	c, ok := f.s.(fencegate.Compactor)
	if !ok {
		f.t.Fatal("the store does not implement fencegate.Compactor")
	}
	a := f.writer("res/a", 5)
	a1 := f.commit(f.admit(a.req(1, "a1")).Receipt.ID, "va1").ID
	a2f := f.settle(f.admit(a.req(2, "a2")).Receipt.ID, failed).ID
	a2 := f.commit(f.admit(a.req(2, "a2b")).Receipt.ID, "va2").ID
	a3 := f.commit(f.admit(a.req(3, "a3")).Receipt.ID, "va3").ID // last accepted: kept

	b := f.writer("res/b", 5)
	b1 := f.commit(f.admit(b.req(1, "b1")).Receipt.ID, "vb1").ID
	f.quarantine(b.req(1, "other"), b1) // names b1: kept
	b2 := f.commit(f.admit(b.req(2, "b2")).Receipt.ID, "vb2").ID

	u := f.writer("res/u", 5)
	u1 := f.commit(f.admit(u.req(1, "u1")).Receipt.ID, "vu1").ID   // before an UNKNOWN segment: kept
	u2 := f.settle(f.admit(u.req(2, "u2")).Receipt.ID, unknown).ID // UNKNOWN: kept

	p := f.writer("res/p", 5)
	p1 := f.commit(f.admit(p.req(1, "p1")).Receipt.ID, "vp1").ID // before a PENDING segment: kept
	p2 := f.admit(p.req(2, "p2")).Receipt.ID                     // PENDING: kept

	cutoff := f.tick()
	e := f.writer("res/e", 5)
	e1 := f.commit(f.admit(e.req(1, "e1")).Receipt.ID, "ve1").ID // settled after the cutoff
	e2 := f.commit(f.admit(e.req(2, "e2")).Receipt.ID, "ve2").ID

	gone := []string{a1, a2f, a2}
	kept := []string{a3, b1, b2, u1, u2, p1, p2, e1, e2}
	before := f.snapshot(true)

	n1, err := c.CompactReceipts(f.ctx, cutoff, 2)
	if err != nil || n1 != 2 {
		f.t.Fatalf("CompactReceipts(limit 2) = %d, %v; want 2", n1, err)
	}
	n2, err := c.CompactReceipts(f.ctx, cutoff, 100)
	if err != nil || n1+n2 != len(gone) {
		f.t.Fatalf("CompactReceipts deleted %d+%d, %v; want %d (%v)", n1, n2, err, len(gone), gone)
	}
	if n, err := c.CompactReceipts(f.ctx, cutoff, 100); err != nil || n != 0 {
		f.t.Fatalf("CompactReceipts again = %d, %v; want 0", n, err)
	}

	for _, id := range gone {
		f.noReceipt(id)
	}
	for _, id := range kept {
		f.receipt(id)
	}
	after := f.snapshot(true)
	f.sameJSON("fence state after compaction", after.Resources, before.Resources)
	f.sameJSON("versions after compaction", after.Versions, before.Versions)
	f.sameJSON("quarantine after compaction", after.Quarantine, before.Quarantine)
	listed := map[string]bool{}
	for _, rs := range after.Receipts {
		for _, r := range rs {
			listed[r.ID] = true
		}
	}
	for _, ids := range after.Operations {
		for _, id := range ids {
			listed[id] = true
		}
	}
	for _, ids := range after.ByResource {
		for _, id := range ids {
			listed[id] = true
		}
	}
	for _, id := range gone {
		if listed[id] {
			f.t.Fatalf("compacted receipt %s is still listed", id)
		}
	}
	for _, id := range kept {
		if !listed[id] {
			f.t.Fatalf("kept receipt %s is not listed", id)
		}
	}
	if _, err := f.s.ReceiptAt(f.ctx, "res/a", 5, 1); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		f.t.Fatalf("ReceiptAt of a compacted segment: %v, want NOT_FOUND", err)
	}

	// A compacted segment's replay is refused, changing nothing; the work goes on.
	f.reject(a.req(1, "a1"), fencegate.CodeSegmentOutOfOrder, "")
	f.replay(a.req(3, "a3"), a3)
	if adm := f.admit(a.req(4, "a4")); adm.PreviousVersion != "va3" {
		f.t.Fatalf("PreviousVersion after compaction = %q, want va3", adm.PreviousVersion)
	}
	if !slices.Contains(ids(f.byResource("res/a")), a3) {
		f.t.Fatal("the last accepted receipt was compacted")
	}
}

// compactionKeepsTheSegmentAGiveBackMakesLast: while a resource has a
// receipt PENDING or UNKNOWN, compaction keeps the receipt of the segment
// before it at the same fence. That receipt may settle FAILED or
// NOT_APPLIED, which gives its segment back: the segment before it is the
// resource's last accepted segment again, and its replay answers the
// original receipt (README, "Retention"). Only that one is kept: an older
// segment still goes, and so does a lower fence's segment of that number (a
// give-back makes the higher fence's segment last, not it, and its replay
// is STALE_OWNER either way).
func compactionKeepsTheSegmentAGiveBackMakesLast(f *fx) {
	c, ok := f.s.(fencegate.Compactor)
	if !ok {
		f.t.Fatal("the store does not implement fencegate.Compactor")
	}
	u := f.writer("res/u", 5)
	u1 := f.commit(f.admit(u.req(1, "u1")).Receipt.ID, "vu1").ID   // older: goes
	u2 := f.commit(f.admit(u.req(2, "u2")).Receipt.ID, "vu2").ID   // before an UNKNOWN segment: kept
	u3 := f.settle(f.admit(u.req(3, "u3")).Receipt.ID, unknown).ID // UNKNOWN

	p := f.writer("res/p", 5)
	p1 := f.commit(f.admit(p.req(1, "p1")).Receipt.ID, "vp1").ID // before a PENDING segment: kept
	p2 := f.admit(p.req(2, "p2")).Receipt.ID                     // PENDING

	w := f.writer("res/w", 5)
	w1 := f.commit(f.admit(w.req(1, "w1")).Receipt.ID, "vw1").ID // segment 1 of a lower fence: goes
	w6 := f.writer("res/w", 6)
	w61 := f.commit(f.admit(w6.req(1, "w61")).Receipt.ID, "vw61").ID // before a PENDING segment: kept
	w62 := f.admit(w6.req(2, "w62")).Receipt.ID                      // PENDING

	cutoff := f.tick()
	if n, err := c.CompactReceipts(f.ctx, cutoff, 100); err != nil || n != 2 {
		f.t.Fatalf("CompactReceipts = %d, %v; want 2 (%s, %s)", n, err, u1, w1)
	}
	f.noReceipt(u1)
	f.noReceipt(w1)
	f.receipt(u2)
	f.receipt(p1)
	f.receipt(w61)

	// The pending segments are given back; the kept ones are the last
	// accepted segments again, answered with their receipts, and the work
	// goes on from them.
	f.settle(u3, notApplied)
	f.settle(p2, failed)
	f.settle(w62, notApplied)
	f.replay(u.req(2, "u2"), u2)
	f.replay(p.req(1, "p1"), p1)
	f.replay(w6.req(1, "w61"), w61)
	f.reject(w.req(1, "w1"), fencegate.CodeStaleOwner, "")
	f.admit(u.req(3, "u3b"))
	f.admit(p.req(2, "p2b"))
	f.admit(w6.req(2, "w62b"))
}
