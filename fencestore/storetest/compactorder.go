package storetest

import "github.com/fencegate/fencegate"

// compactionDeletesTheOldestFirst: fencegate.Compactor's order. CompactReceipts
// deletes, within a state, the oldest receipts first, so a limit of one at
// a time takes them in the order they were written (resources named in
// the reverse order, so that no name order passes for it); CompactQuarantine
// deletes the records of the oldest last attempt first, so a record hit
// again goes after the ones first seen after it.
func compactionDeletesTheOldestFirst(f *fx) {
	c := f.compactor()
	var ws []*writer
	var old []string // COMMITTED, oldest first
	for _, res := range []string{"res/z", "res/m", "res/a"} {
		w := f.writer(res, 5)
		ws = append(ws, w)
		f.tick()
		old = append(old, f.commit(f.admit(w.req(1, res+"-1")).Receipt.ID, "v1").ID)
	}
	for _, w := range ws { // each resource's last accepted segment, kept
		f.commit(f.admit(w.req(2, "2")).Receipt.ID, "v2")
	}
	cutoff := f.tick()
	for i, id := range old {
		if n, err := c.CompactReceipts(f.ctx, cutoff, 1); err != nil || n != 1 {
			f.t.Fatalf("CompactReceipts(limit 1), call %d = %d, %v; want 1", i+1, n, err)
		}
		f.noReceipt(id)
		for _, later := range old[i+1:] {
			f.receipt(later)
		}
	}

	q := f.writer("res/q", 5)
	q1 := f.commit(f.admit(q.req(1, "q1")).Receipt.ID, "vq1").ID
	f.tick()
	first := f.quarantine(q.req(1, "x"), q1)
	f.tick()
	second := f.quarantine(q.req(1, "y"), q1)
	f.tick()
	third := f.quarantine(q.req(1, "w"), q1)
	f.tick()
	if again := f.quarantine(q.req(1, "x"), q1); again.ID != first.ID || again.Attempts != 2 {
		f.t.Fatalf("the first record hit again: %+v, want %s with 2 attempts", again, first.ID)
	}
	cutoff = f.tick()
	order := []fencegate.Quarantine{second, third, first}
	for i, r := range order {
		if n, err := c.CompactQuarantine(f.ctx, cutoff, 1); err != nil || n != 1 {
			f.t.Fatalf("CompactQuarantine(limit 1), call %d = %d, %v; want 1", i+1, n, err)
		}
		f.noQuarantineRecord(r.ID)
		for _, later := range order[i+1:] {
			if _, err := f.s.QuarantineRecord(f.ctx, later.ID); err != nil {
				f.t.Fatalf("call %d deleted %s before %s, whose last attempt was earlier: %v", i+1, later.ID, r.ID, err)
			}
		}
	}
}
