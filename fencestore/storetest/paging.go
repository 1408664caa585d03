package storetest

import (
	"fmt"
	"slices"

	"github.com/fencegate/fencegate"
)

// lister reads one page of a list.
type lister func(page fencegate.Page) (fencegate.ReceiptPage, error)

func (f *fx) listByOperation(op string) lister {
	return func(p fencegate.Page) (fencegate.ReceiptPage, error) { return f.s.ReceiptsByOperation(f.ctx, op, p) }
}

func (f *fx) listByResource(res string) lister {
	return func(p fencegate.Page) (fencegate.ReceiptPage, error) { return f.s.ReceiptsByResource(f.ctx, res, p) }
}

func (f *fx) listByState(st fencegate.ReceiptState) lister {
	return func(p fencegate.Page) (fencegate.ReceiptPage, error) { return f.s.ReceiptsByState(f.ctx, st, p) }
}

// follow reads every page of a list with pages of limit, checking that each
// page respects the limit and that receipts come strictly in (createdAt, ID)
// order, none twice.
func (f *fx) follow(what string, list lister, limit int) []fencegate.Receipt {
	f.t.Helper()
	var all []fencegate.Receipt
	page := fencegate.Page{Limit: limit}
	for n := 0; ; n++ {
		if n > 10_000 {
			f.t.Fatalf("%s: the cursors never end", what)
		}
		p, err := list(page)
		if err != nil {
			f.t.Fatalf("%s page %d: %v", what, n, err)
		}
		if len(p.Receipts) > page.Size() {
			f.t.Fatalf("%s page %d holds %d receipts, over the limit %d", what, n, len(p.Receipts), page.Size())
		}
		if p.Next != "" && len(p.Receipts) == 0 {
			f.t.Fatalf("%s page %d is empty but names a next page", what, n)
		}
		all = append(all, p.Receipts...)
		if p.Next == "" {
			break
		}
		page.Cursor = p.Next
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if !(a.CreatedAt.Before(b.CreatedAt) || a.CreatedAt.Equal(b.CreatedAt) && a.ID < b.ID) {
			f.t.Fatalf("%s: %s then %s is not (createdAt, ID) order, or repeats", what, a.ID, b.ID)
		}
	}
	return all
}

func (f *fx) byOperation(op string) []fencegate.Receipt {
	f.t.Helper()
	return f.follow("ReceiptsByOperation("+op+")", f.listByOperation(op), 0)
}

func (f *fx) byResource(res string) []fencegate.Receipt {
	f.t.Helper()
	return f.follow("ReceiptsByResource("+res+")", f.listByResource(res), 0)
}

// byState is the first page of at most limit receipts in state, or (limit 0)
// every receipt in it.
func (f *fx) byState(st fencegate.ReceiptState, limit int) []fencegate.Receipt {
	f.t.Helper()
	if limit == 0 {
		return f.follow("ReceiptsByState("+string(st)+")", f.listByState(st), 0)
	}
	p, err := f.s.ReceiptsByState(f.ctx, st, fencegate.Page{Limit: limit})
	if err != nil {
		f.t.Fatalf("ReceiptsByState(%s, %d): %v", st, limit, err)
	}
	return p.Receipts
}

// listsArePagedWithStableCursors: every list pages in (createdAt, ID) order;
// following Next with any limit yields the whole list once; a receipt added
// between pages appears on a later page, one that leaves a list (settled out
// of PENDING) never makes another be skipped or repeated.
func listsArePagedWithStableCursors(f *fx) {
	var opIDs, resA []string
	for i := range 7 {
		res := []string{"res/a", "res/b"}[i%2]
		w := f.writer(res, uint64(10+i))
		w.g.OperationID = "op-P"
		id := f.admit(w.req(1, fmt.Sprint("p", i))).Receipt.ID
		opIDs = append(opIDs, id)
		if res == "res/a" {
			resA = append(resA, id)
		}
		if i < 5 {
			f.commit(id, fmt.Sprint("v", i))
		}
	}
	for _, limit := range []int{1, 2, 3, 7, 8, fencegate.MaxPageLimit} {
		if got := ids(f.follow("by operation", f.listByOperation("op-P"), limit)); !slices.Equal(got, opIDs) {
			f.t.Fatalf("ReceiptsByOperation(op-P) in pages of %d = %v, want %v", limit, got, opIDs)
		}
		if got := ids(f.follow("by resource", f.listByResource("res/a"), limit)); !slices.Equal(got, resA) {
			f.t.Fatalf("ReceiptsByResource(res/a) in pages of %d = %v, want %v", limit, got, resA)
		}
	}
	// A full last page says nothing follows; a page of all says the same.
	if p, err := f.s.ReceiptsByOperation(f.ctx, "op-P", fencegate.Page{Limit: 7}); err != nil || len(p.Receipts) != 7 || p.Next != "" {
		f.t.Fatalf("ReceiptsByOperation(op-P, 7) = %d receipts, next %q, %v; want 7 and no next page", len(p.Receipts), p.Next, err)
	}

	// Between two pages: a new receipt is added and a listed one leaves the list.
	first, err := f.s.ReceiptsByOperation(f.ctx, "op-P", fencegate.Page{Limit: 3})
	if err != nil || len(first.Receipts) != 3 || first.Next == "" {
		f.t.Fatalf("first page: %d receipts, next %q, %v", len(first.Receipts), first.Next, err)
	}
	w := f.writer("res/c", 20)
	w.g.OperationID = "op-P"
	added := f.admit(w.req(1, "late")).Receipt.ID
	rest := f.follow("rest", func(p fencegate.Page) (fencegate.ReceiptPage, error) {
		if p.Cursor == "" {
			p.Cursor = first.Next
		}
		return f.s.ReceiptsByOperation(f.ctx, "op-P", p)
	}, 2)
	if got, want := ids(append(first.Receipts, rest...)), append(slices.Clone(opIDs), added); !slices.Equal(got, want) {
		f.t.Fatalf("pages around an added receipt = %v, want %v", got, want)
	}

	pending := ids(f.byState(fencegate.ReceiptPending, 0)) // opIDs[5], opIDs[6], added
	p1, err := f.s.ReceiptsByState(f.ctx, fencegate.ReceiptPending, fencegate.Page{Limit: 1})
	if err != nil || len(p1.Receipts) != 1 || p1.Receipts[0].ID != pending[0] {
		f.t.Fatalf("PENDING page 1: %v %v", ids(p1.Receipts), err)
	}
	f.commit(pending[0], "v-late") // leaves the list it was read from
	p2, err := f.s.ReceiptsByState(f.ctx, fencegate.ReceiptPending, fencegate.Page{Limit: 10, Cursor: p1.Next})
	if err != nil || !slices.Equal(ids(p2.Receipts), pending[1:]) || p2.Next != "" {
		f.t.Fatalf("PENDING after a listed receipt settled = %v (next %q) %v, want %v", ids(p2.Receipts), p2.Next, err, pending[1:])
	}
}

// badPagesAreRefusedWithoutStateChange: a limit below 0 or above
// MaxPageLimit, a cursor of another list (another operation, another kind of
// list) and a cursor that is not one are INVALID_REQUEST; nothing changes.
func badPagesAreRefusedWithoutStateChange(f *fx) {
	for i := range 3 {
		w := f.writer("res/a", uint64(5+i))
		w.g.OperationID = "op-Q"
		f.commit(f.admit(w.req(1, "a")).Receipt.ID, "v")
	}
	page, err := f.s.ReceiptsByOperation(f.ctx, "op-Q", fencegate.Page{Limit: 1})
	if err != nil || page.Next == "" {
		f.t.Fatalf("first page: %v next %q", err, page.Next)
	}
	before := f.snapshot(true)
	refused := map[string]error{}
	_, refused["limit -1"] = f.s.ReceiptsByOperation(f.ctx, "op-Q", fencegate.Page{Limit: -1})
	_, refused["limit over max"] = f.s.ReceiptsByState(f.ctx, fencegate.ReceiptCommitted, fencegate.Page{Limit: fencegate.MaxPageLimit + 1})
	_, refused["cursor of another operation"] = f.s.ReceiptsByOperation(f.ctx, "op-other", fencegate.Page{Cursor: page.Next})
	_, refused["cursor of another list"] = f.s.ReceiptsByResource(f.ctx, "res/a", fencegate.Page{Cursor: page.Next})
	_, refused["cursor of another state"] = f.s.ReceiptsByState(f.ctx, fencegate.ReceiptPending, fencegate.Page{Cursor: page.Next})
	_, refused["not a cursor"] = f.s.ReceiptsByOperation(f.ctx, "op-Q", fencegate.Page{Cursor: "not-a-cursor!"})
	_, refused["truncated cursor"] = f.s.ReceiptsByOperation(f.ctx, "op-Q", fencegate.Page{Cursor: page.Next[:len(page.Next)/2]})
	for name, err := range refused {
		if fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			f.t.Fatalf("%s: %v, want INVALID_REQUEST", name, err)
		}
	}
	f.sameJSON("store after refused pages", f.snapshot(true), before)
	if _, err := f.s.ReceiptsByOperation(f.ctx, "op-Q", fencegate.Page{Limit: fencegate.MaxPageLimit}); err != nil {
		f.t.Fatalf("limit = MaxPageLimit: %v", err)
	}
}

// largeReceiptsEndAPageEarly: a page stops once it holds about MaxPageBytes
// (receipts keep requests of up to a MiB), always with at least one receipt,
// and the cursor goes on from there.
func largeReceiptsEndAPageEarly(f *fx) {
	var want []string
	for i := range 5 {
		w := f.writer("res/big", uint64(5+i))
		req := w.req(1, fmt.Sprint("big", i))
		req.Request = apiRequest()
		req.Request.Body = make([]byte, 900<<10)
		id := f.admit(req).Receipt.ID
		f.commit(id, "v")
		want = append(want, id)
	}
	first, err := f.s.ReceiptsByResource(f.ctx, "res/big", fencegate.Page{Limit: 10})
	if err != nil {
		f.t.Fatal(err)
	}
	size := 0
	for i := range first.Receipts {
		size += first.Receipts[i].ApproxSize()
	}
	if len(first.Receipts) == 0 || len(first.Receipts) == 5 || first.Next == "" || (len(first.Receipts) > 1 && size > fencegate.MaxPageBytes) {
		f.t.Fatalf("first page of 5 receipts of 900 KiB: %d receipts, %d bytes, next %q; want it to end early under %d bytes",
			len(first.Receipts), size, first.Next, fencegate.MaxPageBytes)
	}
	if got := ids(f.byResource("res/big")); !slices.Equal(got, want) {
		f.t.Fatalf("all pages = %v, want %v", got, want)
	}
}
