package storetest

import (
	"fmt"

	"github.com/fencegate/fencegate"
)

// concurrentAdmissionsIsolateAFailingMember fires, in rounds, admissions on
// many distinct resources at once — as a store that commits concurrent calls
// together (group commit) sees them — among them one reusing a receipt ID
// (INVALID_REQUEST from the database itself, not the rules) and one out of
// order on a new resource; then settles them all at once, among them a settle
// of an unknown receipt and an illegal one. Every other member must succeed
// exactly as alone, and the failing ones leave nothing behind: no resource
// row, no binding, no receipt.
func concurrentAdmissionsIsolateAFailingMember(f *fx) {
	const (
		workers = 24
		rounds  = 3
	)
	dup := f.writer("res/dup", 1)
	dupID := f.commit(f.admit(dup.req(1, "d")).Receipt.ID, "v-dup").ID
	versions := map[string]string{}
	for round := range rounds {
		seg := uint64(round + 1)
		type call struct {
			req  fencegate.AdmitRequest
			want fencegate.Code // "" accepted
			adm  fencegate.Admission
			err  error
		}
		var calls []*call
		for i := range workers {
			req := f.writer(fmt.Sprintf("res/many/%02d", i), 3).req(seg, fmt.Sprintf("p%d-%d", i, round))
			calls = append(calls, &call{req: req})
		}
		bad := grantFor(fmt.Sprintf("res/bad-id/%d", round), 4)
		calls = append(calls, &call{want: fencegate.CodeInvalidRequest, req: fencegate.AdmitRequest{
			Grant: bad, Segment: 1, Target: bad.Resource, Method: "PUT", PayloadDigest: "sha256:x",
			ReceiptID: dupID, Now: f.tick()}})
		late := grantFor(fmt.Sprintf("res/late/%d", round), 4)
		calls = append(calls, &call{want: fencegate.CodeSegmentOutOfOrder, req: fencegate.AdmitRequest{
			Grant: late, Segment: 2, Target: late.Resource, Method: "PUT", PayloadDigest: "sha256:y",
			ReceiptID: fmt.Sprintf("rcpt-late-%d", round), Now: f.tick()}})
		together(len(calls), func(i int) { calls[i].adm, calls[i].err = f.s.Admit(f.ctx, calls[i].req) })

		type settle struct {
			id   string
			o    fencegate.Outcome
			want fencegate.Code
			err  error
		}
		var settles []*settle
		for _, c := range calls {
			if c.want != "" {
				wantCode(f.t, c.err, c.want, "")
				for _, res := range []string{c.req.Grant.Resource} {
					_, err := f.s.Resource(f.ctx, res)
					wantCode(f.t, err, fencegate.CodeNotFound, "")
				}
				if b, ok := f.s.(fencegate.TargetBindings); ok {
					_, err := b.Binding(f.ctx, c.req.Target)
					wantCode(f.t, err, fencegate.CodeNotFound, "")
				}
				if c.req.ReceiptID != dupID {
					f.noReceipt(c.req.ReceiptID)
				}
				continue
			}
			if c.err != nil || c.adm.Replay || c.adm.Receipt.ID != c.req.ReceiptID {
				f.t.Fatalf("round %d: admit %s: %+v, %v; want a new admission", round, c.req.Grant.Resource, c.adm, c.err)
			}
			if c.adm.PreviousVersion != versions[c.req.Target] {
				f.t.Fatalf("round %d: PreviousVersion of %s = %q, want %q", round, c.req.Target, c.adm.PreviousVersion, versions[c.req.Target])
			}
			settles = append(settles, &settle{id: c.req.ReceiptID, o: fencegate.Outcome{
				State: fencegate.ReceiptCommitted, Version: "v-" + c.req.ReceiptID, Now: f.tick()}})
		}
		settles = append(settles,
			&settle{id: "rcpt-none", o: fencegate.Outcome{State: fencegate.ReceiptCommitted, Now: f.tick()}, want: fencegate.CodeNotFound},
			&settle{id: dupID, o: fencegate.Outcome{State: fencegate.ReceiptPending, Now: f.tick()}, want: fencegate.CodeReceiptSettled})
		together(len(settles), func(i int) { _, settles[i].err = f.s.Settle(f.ctx, settles[i].id, settles[i].o) })
		for _, st := range settles {
			if st.want != "" {
				wantCode(f.t, st.err, st.want, "")
				continue
			}
			if st.err != nil {
				f.t.Fatalf("round %d: settle %s: %v", round, st.id, st.err)
			}
		}
		for _, c := range calls {
			if c.want != "" {
				continue
			}
			r := f.receipt(c.req.ReceiptID)
			if r.State != fencegate.ReceiptCommitted || r.Version != "v-"+r.ID {
				f.t.Fatalf("round %d: receipt %s is %s %q, want COMMITTED v-%s", round, r.ID, r.State, r.Version, r.ID)
			}
			row := f.resource(c.req.Grant.Resource)
			if row.LastSegmentSeq != seg || row.PendingReceipt != "" || row.HighestFence != 3 {
				f.t.Fatalf("round %d: %s state %+v, want segment %d, nothing pending", round, row.Resource, row, seg)
			}
			versions[c.req.Target] = f.version(c.req.Target)
			if versions[c.req.Target] != "v-"+r.ID {
				f.t.Fatalf("round %d: version of %s = %q", round, c.req.Target, versions[c.req.Target])
			}
		}
	}
	if r := f.receipt(dupID); r.Resource != "res/dup" || r.State != fencegate.ReceiptCommitted {
		f.t.Fatalf("the receipt whose ID was reused changed: %+v", r)
	}
}
