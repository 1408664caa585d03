package storetest

import (
	"fmt"
	"sync"

	"github.com/fencegate/fencegate"
)

// concurrentRefusalsAreIsolated fires admissions on many resources at once,
// mixing accepted ones with refusals of every kind (a stale fence, a skipped
// segment, a receipt ID in use, a replay), and then their settles mixed with
// illegal ones. A store that shares one commit between concurrent calls
// (group commit) must answer each caller as if it had run alone: every
// accepted call is durable and complete, every refused one has its own code
// and changed nothing of its resource.
func concurrentRefusalsAreIsolated(f *fx) {
	const n = 24
	type call struct {
		req  fencegate.AdmitRequest
		want fencegate.Code // "" accepted, "replay" for a replay
	}
	calls := make([]call, n)
	firsts := make([]fencegate.Admission, n)
	for i := range n {
		w := f.writer(fmt.Sprintf("res/batch-%02d", i), 5)
		firsts[i] = f.admit(w.req(1, "one"))
		f.commit(firsts[i].Receipt.ID, fmt.Sprintf("v1-%d", i))
		switch i % 5 {
		case 0:
			calls[i] = call{req: f.writer(w.g.Resource, 3).req(1, "stale"), want: fencegate.CodeStaleOwner}
		case 1:
			calls[i] = call{req: w.req(3, "skipped"), want: fencegate.CodeSegmentOutOfOrder}
		case 2:
			req := w.req(2, "two")
			req.ReceiptID = firsts[0].Receipt.ID
			calls[i] = call{req: req, want: fencegate.CodeInvalidRequest}
		case 3:
			req := w.req(1, "one")
			req.ReceiptID = firsts[i].Receipt.ID + "-again"
			calls[i] = call{req: req, want: "replay"}
		default:
			calls[i] = call{req: w.req(2, "two")}
		}
	}
	before := make([]resourceView, n)
	for i := range n {
		before[i] = f.view(calls[i].req.Grant.Resource)
	}

	adms := make([]fencegate.Admission, n)
	errs := make([]error, n)
	together(n, func(i int) { adms[i], errs[i] = f.s.Admit(f.ctx, calls[i].req) })

	var settles []int
	for i, c := range calls {
		res := c.req.Grant.Resource
		switch c.want {
		case "":
			if errs[i] != nil {
				f.t.Fatalf("admission %d (%s segment 2), run with refusals beside it: %v", i, res, errs[i])
			}
			got := f.receipt(c.req.ReceiptID)
			if got.State != fencegate.ReceiptPending || got.Segment != 2 || adms[i].PreviousVersion != fmt.Sprintf("v1-%d", i) {
				f.t.Fatalf("admission %d: receipt %+v, previous version %q", i, got, adms[i].PreviousVersion)
			}
			if row := f.resource(res); row.LastSegmentSeq != 2 || row.PendingReceipt != c.req.ReceiptID {
				f.t.Fatalf("admission %d: resource %+v", i, row)
			}
			settles = append(settles, i)
		case "replay":
			if errs[i] != nil || !adms[i].Replay || adms[i].Receipt.ID != firsts[i].Receipt.ID {
				f.t.Fatalf("replay %d: %+v, %v; want the original receipt %s", i, adms[i], errs[i], firsts[i].Receipt.ID)
			}
			f.sameJSON(fmt.Sprintf("%s after a replay", res), f.view(res), before[i])
		default:
			wantCode(f.t, errs[i], c.want, "")
			f.sameJSON(fmt.Sprintf("%s after a refused admission (%s) in a crowd", res, c.want), f.view(res), before[i])
			f.noReceiptUnlessUsed(c.req.ReceiptID, firsts)
		}
	}

	// Settles of the accepted ones, each beside an illegal settle (a committed
	// receipt cannot fail) and a settle of a receipt that does not exist.
	m := len(settles)
	serrs := make([]error, 3*m)
	together(3*m, func(j int) {
		i := settles[j%m]
		switch j / m {
		case 0:
			_, serrs[j] = f.s.Settle(f.ctx, calls[i].req.ReceiptID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: fmt.Sprintf("v2-%d", i), Now: calls[i].req.Now})
		case 1:
			_, serrs[j] = f.s.Settle(f.ctx, firsts[i].Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptFailed, Error: "late", Now: calls[i].req.Now})
		default:
			_, serrs[j] = f.s.Settle(f.ctx, fmt.Sprintf("rcpt-none-%d", j), fencegate.Outcome{State: fencegate.ReceiptCommitted, Now: calls[i].req.Now})
		}
	})
	for j, err := range serrs {
		i := settles[j%m]
		switch j / m {
		case 0:
			if err != nil {
				f.t.Fatalf("settle of %s beside refused settles: %v", calls[i].req.ReceiptID, err)
			}
			res := calls[i].req.Grant.Resource
			if r := f.receipt(calls[i].req.ReceiptID); r.State != fencegate.ReceiptCommitted {
				f.t.Fatalf("settled receipt %s is %s", r.ID, r.State)
			}
			if v := f.version(res); v != fmt.Sprintf("v2-%d", i) {
				f.t.Fatalf("version of %s = %q after its settle", res, v)
			}
			if row := f.resource(res); row.PendingReceipt != "" {
				f.t.Fatalf("resource %s still pending after its settle: %+v", res, row)
			}
		case 1:
			wantCode(f.t, err, fencegate.CodeReceiptSettled, "")
			if r := f.receipt(firsts[i].Receipt.ID); r.State != fencegate.ReceiptCommitted {
				f.t.Fatalf("a refused settle moved %s to %s", r.ID, r.State)
			}
		default:
			wantCode(f.t, err, fencegate.CodeNotFound, "")
		}
	}
}

// resourceView is what a client reads about one resource.
type resourceView struct {
	Row      any
	Receipts []fencegate.Receipt
	Live     map[uint64]string
}

func (f *fx) view(res string) resourceView {
	f.t.Helper()
	v := resourceView{Receipts: f.byResource(res), Live: map[uint64]string{}}
	row, err := f.s.Resource(f.ctx, res)
	if err != nil {
		wantCode(f.t, err, fencegate.CodeNotFound, "")
		v.Row = "NOT_FOUND"
		return v
	}
	v.Row = row
	for seg := uint64(1); seg <= row.LastSegmentSeq+1; seg++ {
		if r, err := f.s.ReceiptAt(f.ctx, res, row.HighestFence, seg); err == nil {
			v.Live[seg] = r.ID
		}
	}
	return v
}

// noReceiptUnlessUsed checks that a refused admission left no receipt under
// its ID, unless the ID was one already in use.
func (f *fx) noReceiptUnlessUsed(id string, used []fencegate.Admission) {
	f.t.Helper()
	for _, a := range used {
		if a.Receipt.ID == id {
			return
		}
	}
	f.noReceipt(id)
}

// together runs fn(0..n-1) in n goroutines released at the same moment and
// waits for all of them.
func together(n int, fn func(i int)) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			fn(i)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
}
