package storetest

import (
	"slices"

	"github.com/fencegate/fencegate"
)

// compactionKeepsWhatRulesAndReplaysNeed settles receipts of every kind, then
// compacts those settled before a cutoff: settled receipts go (from every
// lookup and list, at most limit per call), while PENDING and UNKNOWN ones, a
// resource's last accepted segment, a receipt a quarantine record names and
// everything settled after the cutoff stay. Fence state, versions and
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
	u1 := f.commit(f.admit(u.req(1, "u1")).Receipt.ID, "vu1").ID
	u2 := f.settle(f.admit(u.req(2, "u2")).Receipt.ID, unknown).ID // UNKNOWN: kept

	p := f.writer("res/p", 5)
	p1 := f.commit(f.admit(p.req(1, "p1")).Receipt.ID, "vp1").ID
	p2 := f.admit(p.req(2, "p2")).Receipt.ID // PENDING: kept

	cutoff := f.tick()
	e := f.writer("res/e", 5)
	e1 := f.commit(f.admit(e.req(1, "e1")).Receipt.ID, "ve1").ID // settled after the cutoff
	e2 := f.commit(f.admit(e.req(2, "e2")).Receipt.ID, "ve2").ID

	gone := []string{a1, a2f, a2, u1, p1}
	kept := []string{a3, b1, b2, u2, p2, e1, e2}
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
