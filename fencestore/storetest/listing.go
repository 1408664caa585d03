package storetest

import (
	"fmt"
	"slices"
	"time"

	"github.com/fencegate/fencegate"
)

func receiptsByOperationAreOrdered(f *fx) {
	// Receipt IDs run against creation order, so that an ID order would show.
	name := 100
	id := func(req fencegate.AdmitRequest) fencegate.AdmitRequest {
		name--
		req.ReceiptID = fmt.Sprintf("op-rcpt-%03d", name)
		return req
	}
	w5, w6, y := f.writer("res/a", 5), f.writer("res/a", 6), f.writer("res/y", 1)
	w5.g.OperationID, w6.g.OperationID, y.g.OperationID = "op-X", "op-X", "op-Y"
	var want []string
	admit := func(w *writer, seg uint64, payload string, o fencegate.Outcome) {
		a := f.admit(id(w.req(seg, payload)))
		f.settle(a.Receipt.ID, o)
		if w.g.OperationID == "op-X" {
			want = append(want, a.Receipt.ID)
		}
	}
	admit(w5, 1, "a", committed)
	admit(y, 1, "y1", committed)
	admit(w5, 2, "b", failed)
	admit(w5, 2, "b2", committed)
	admit(y, 2, "y2", committed)
	admit(w6, 1, "c", unknown)
	f.settle(want[len(want)-1], committed)

	got := f.byOperation("op-X")
	if !slices.Equal(ids(got), want) {
		f.t.Fatalf("ReceiptsByOperation(op-X) = %v, want %v (oldest first)", ids(got), want)
	}
	for _, r := range got {
		f.sameJSON("listed receipt", r, f.receipt(r.ID))
	}
	if got := f.byOperation("op-Y"); len(got) != 2 || got[0].Segment != 1 || got[1].Segment != 2 {
		f.t.Fatalf("ReceiptsByOperation(op-Y) = %v", ids(got))
	}

	// Order is by creation time even when a receipt is stored after a newer one.
	early := id(y.req(3, "y3"))
	early.Now = time.UnixMilli(baseMs - 1000).UTC()
	f.admit(early)
	if got := f.byOperation("op-Y"); len(got) != 3 || got[0].ID != early.ReceiptID {
		f.t.Fatalf("ReceiptsByOperation(op-Y) = %v, want %s first", ids(got), early.ReceiptID)
	}
}

func receiptsByState(f *fx) {
	admit := func(res string) string { return f.admit(f.writer(res, 1).req(1, "a")).Receipt.ID }
	r1 := admit("res/1")
	r2 := admit("res/2")
	r3 := admit("res/3")
	r4 := admit("res/4")
	r5 := admit("res/5")
	f.settle(r2, unknown)
	f.commit(r3, "v3")
	f.settle(r4, failed)

	check := func(st fencegate.ReceiptState, limit int, want ...string) {
		f.t.Helper()
		if got := ids(f.byState(st, limit)); !slices.Equal(got, want) {
			f.t.Fatalf("ReceiptsByState(%s, %d) = %v, want %v", st, limit, got, want)
		}
	}
	check(fencegate.ReceiptPending, 10, r1, r5)
	check(fencegate.ReceiptPending, 1, r1)
	check(fencegate.ReceiptPending, 0, r1, r5)
	check(fencegate.ReceiptUnknown, 10, r2)
	check(fencegate.ReceiptCommitted, 10, r3)
	check(fencegate.ReceiptFailed, 10, r4)
	check(fencegate.ReceiptNotApplied, 10)

	f.commit(r1, "v1")
	f.settle(r2, notApplied)
	check(fencegate.ReceiptPending, 10, r5)
	check(fencegate.ReceiptCommitted, 10, r1, r3)
	check(fencegate.ReceiptCommitted, 1, r1)
	check(fencegate.ReceiptUnknown, 10)
	check(fencegate.ReceiptNotApplied, 10, r2)
}
