package storetest

import (
	"fmt"

	"github.com/fencegate/fencegate"
)

// groupCommitsCountAdmissionsAndSettles checks fencegate.GroupCommitter (skipped,
// saying so, for a store that does not implement it): a lone admission is one
// batch carrying one write; concurrent admissions and then their settles
// are counted once each, in at least one batch and at most one per write.
func groupCommitsCountAdmissionsAndSettles(f *fx) {
	gc, ok := f.s.(fencegate.GroupCommitter)
	if !ok {
		f.t.Skipf("%T does not implement fencegate.GroupCommitter: this rule runs once it does", f.s)
	}
	b0, w0 := gc.GroupCommits()
	lone := f.admit(f.writer("res/lone", 4).req(1, "one"))
	b1, w1 := gc.GroupCommits()
	if b1-b0 != 1 || w1-w0 != 1 {
		f.t.Fatalf("a lone admission counted %d batches and %d writes, want 1 and 1", b1-b0, w1-w0)
	}
	f.commit(lone.Receipt.ID, "v-lone")

	const n = 16
	reqs := make([]fencegate.AdmitRequest, n)
	for i := range n {
		reqs[i] = f.writer(fmt.Sprintf("res/group-%02d", i), 4).req(1, "one")
	}
	b0, w0 = gc.GroupCommits()
	errs := make([]error, n)
	together(n, func(i int) { _, errs[i] = f.s.Admit(f.ctx, reqs[i]) })
	together(n, func(i int) {
		if errs[i] == nil {
			_, errs[i] = f.s.Settle(f.ctx, reqs[i].ReceiptID, fencegate.Outcome{State: fencegate.ReceiptCommitted,
				Version: fmt.Sprintf("v-%d", i), Now: reqs[i].Now})
		}
	})
	for i, err := range errs {
		if err != nil {
			f.t.Fatalf("write %d: %v", i, err)
		}
	}
	b1, w1 = gc.GroupCommits()
	if batches, writes := b1-b0, w1-w0; writes != 2*n || batches < 1 || batches > writes {
		f.t.Fatalf("%d admissions and their settles counted %d writes in %d batches, want %d writes in 1 to %d batches",
			n, writes, batches, 2*n, 2*n)
	}
}
