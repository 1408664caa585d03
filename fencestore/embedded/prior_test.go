package embedded

import (
	"context"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// TestPriorFaultLeavesBothUndecided: a fault after the prior settle was
// written (here a panic while the segment's quarantine record is made) rolls
// the whole op back: Admit answers no verdict and a zero Admission, and the
// prior is as unsettled as the segment is unadmitted.
func TestPriorFaultLeavesBothUndecided(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	if _, err := s.Admit(ctx, admitReq("res/a", 1, "r1")); err != nil {
		t.Fatal(err)
	}
	req := admitReq("res/a", 1, "r2")
	req.PayloadDigest = "sha256:other" // segment 1 again, another payload: quarantined
	req.QuarantinePayload = func() ([]byte, error) { panic("disk gone") }
	req.Prior = &fencegate.PriorSettle{ReceiptID: "r1", Outcome: fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1", Now: req.Now}}
	adm, err := s.Admit(ctx, req)
	if fencegate.ErrorCode(err) != fencegate.CodeInternal || adm.Prior != nil || adm.PriorErr != nil {
		t.Fatalf("a fault with a prior: %+v, %v; want INTERNAL and no answer for the prior", adm, err)
	}
	if r, _ := s.Receipt(ctx, "r1"); r.State != fencegate.ReceiptPending {
		t.Fatalf("the prior of a failed op is %s, want PENDING", r.State)
	}
	if row, _ := s.Resource(ctx, "res/a"); row.PendingReceipt != "r1" {
		t.Fatalf("the prior of a failed op freed the resource: %+v", row)
	}
	if v, _ := s.Version(ctx, "res/a"); v != "" {
		t.Fatalf("the prior of a failed op recorded version %q", v)
	}
	if q, _ := s.Quarantined(ctx, "", fencegate.Page{}); len(q.Records) != 0 {
		t.Fatalf("a failed op left quarantine records %+v", q.Records)
	}
}

// TestPriorsRunAgainAreAppliedOnce: when a batch is rolled back for another
// op's fault and run again, each prior in it is applied once (an UNKNOWN
// prior adding one attempt would show two).
func TestPriorsRunAgainAreAppliedOnce(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	ress := []string{"res/a", "res/b", "res/c"}
	for i, res := range ress {
		if _, err := s.Admit(ctx, admitReq(res, 1, "first-"+ress[i])); err != nil {
			t.Fatal(err)
		}
	}
	release := hold(t, s)
	var wg sync.WaitGroup
	errs := make([]error, len(ress))
	for i, res := range ress {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := admitReq(res, 2, "second-"+res)
			req.Prior = &fencegate.PriorSettle{ReceiptID: "first-" + res,
				Outcome: fencegate.Outcome{State: fencegate.ReceiptUnknown, Attempts: 1, Now: req.Now}}
			_, errs[i] = s.Admit(ctx, req)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = s.batch.do(func(*bolt.Tx) error { panic("boom") })
	}()
	waitQueued(s, len(ress)+1)
	release()
	wg.Wait()
	for i, res := range ress {
		if fencegate.ErrorCode(errs[i]) != fencegate.CodeResourceBusy {
			t.Fatalf("%s: %v, want RESOURCE_BUSY on its UNKNOWN prior", res, errs[i])
		}
		if r, _ := s.Receipt(ctx, "first-"+res); r.State != fencegate.ReceiptUnknown || r.Attempts != 1 {
			t.Fatalf("prior of %s: %s with %d attempts, want UNKNOWN with 1", res, r.State, r.Attempts)
		}
	}
	if st := s.Stats(); st.Commits < 4 {
		t.Fatalf("stats %+v: the batch was not run again", st)
	}
}
