package client

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/domain"
)

func TestSegmentsAreNumberedFromOneUnderOneGrant(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	w := l.Objects("bucket")
	for _, k := range []string{"jobs/a", "jobs/b"} {
		if _, err := w.Put(ctx, k, strings.NewReader(k), "text/plain"); err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
	}
	if _, err := l.API("payments").Call(ctx, "POST", "charges/1", []byte("{}"), "application/json"); err != nil {
		t.Fatalf("call: %v", err)
	}
	if _, err := w.Delete(ctx, "jobs/a"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if len(f.writes) != 4 {
		t.Fatalf("%d writes", len(f.writes))
	}
	for i, h := range f.writes {
		if got, want := h.Get("Fence-Segment"), string(rune('1'+i)); got != want {
			t.Errorf("write %d carried segment %s, want %s", i, got, want)
		}
		if h.Get("Fence-Grant") != "grant-7" || h.Get("Fence-Status") == "" {
			t.Errorf("write %d fence headers %v", i, h)
		}
	}
	if l.NextSegment() != 5 {
		t.Fatalf("next segment %d", l.NextSegment())
	}
}

func TestStaleStatusProofIsRefreshedBeforeTheNextWrite(t *testing.T) {
	f, l := held(t)
	first := l.StatusProof()
	f.clock.Advance(statusLife - 1) // past 4/5 of the proof's life
	if _, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), ""); err != nil {
		t.Fatalf("put: %v", err)
	}
	if f.count("status") != 1 {
		t.Fatalf("status queries %d, want 1", f.count("status"))
	}
	if got := f.writes[0].Get("Fence-Status"); got == first || got != l.StatusProof() {
		t.Fatalf("write carried proof %q (first %q, current %q)", got, first, l.StatusProof())
	}
}

func TestMutationUnknownIsSettledFromReceiptsBeforeAnythingNew(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	w := l.Objects("bucket")
	f.refuseNext("write", domain.CodeMutationUnknown)
	_, err := w.Put(ctx, "jobs/a", strings.NewReader("payload"), "")
	wantCode(t, err, domain.CodeMutationUnknown)

	// Still unknown: the receipts are asked, nothing is submitted.
	_, err = w.Put(ctx, "jobs/a", strings.NewReader("payload"), "")
	wantCode(t, err, domain.CodeMutationUnknown)
	_, err = w.Put(ctx, "jobs/other", strings.NewReader("new"), "")
	wantCode(t, err, domain.CodeMutationUnknown)
	if f.count("write") != 1 || f.count("receipts") != 2 {
		t.Fatalf("writes %d receipts queries %d", f.count("write"), f.count("receipts"))
	}

	// Settled COMMITTED: the retry reuses the accepted result.
	f.settle("R1", domain.ReceiptCommitted)
	rc, err := w.Put(ctx, "jobs/a", strings.NewReader("payload"), "")
	if err != nil || rc.ID != "R1" || rc.State != domain.ReceiptCommitted {
		t.Fatalf("reuse: %+v, %v", rc, err)
	}
	if f.count("write") != 1 {
		t.Fatalf("the committed segment was sent again (%d writes)", f.count("write"))
	}
	// Something new gets the next number.
	if _, err := w.Put(ctx, "jobs/b", strings.NewReader("b"), ""); err != nil {
		t.Fatal(err)
	}
	if got := f.writes[1].Get("Fence-Segment"); got != "2" {
		t.Fatalf("next write segment %s, want 2", got)
	}
}

func TestSegmentNotAppliedIsFreeForTheNextCommit(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	w := l.Objects("bucket")
	f.refuseNext("write", domain.CodeMutationUnknown)
	_, _ = w.Put(ctx, "jobs/a", strings.NewReader("x"), "")
	f.settle("R1", domain.ReceiptNotApplied)
	if _, err := w.Put(ctx, "jobs/a", strings.NewReader("x"), ""); err != nil {
		t.Fatal(err)
	}
	if len(f.writes) != 2 || f.writes[1].Get("Fence-Segment") != "1" {
		t.Fatalf("retry after NOT_APPLIED: %d writes, segment %s", len(f.writes), f.writes[len(f.writes)-1].Get("Fence-Segment"))
	}
}

func TestLostWriteAnswerIsSettledFromReceipts(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	f.loseNext("write") // PUT is not retried by net/http: the body may have been used
	_, err := l.Objects("bucket").Put(ctx, "jobs/a", strings.NewReader("x"), "")
	if !IsUncertain(err) {
		t.Fatalf("want uncertain, got %v", err)
	}
	rc, err := l.Objects("bucket").Put(ctx, "jobs/a", strings.NewReader("x"), "")
	if err != nil || rc.ID != "R1" || f.count("write") != 1 {
		t.Fatalf("reuse after lost answer: %+v %v, writes %d", rc, err, f.count("write"))
	}
}

func TestAPICallUnknownOutcomeReusesTheStoredAnswer(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	api := l.API("payments")
	f.refuseNext("write", domain.CodeMutationUnknown)
	_, err := api.Call(ctx, "POST", "charges/1", []byte(`{"amount":5}`), "application/json")
	wantCode(t, err, domain.CodeMutationUnknown)
	f.mu.Lock()
	f.receipts[0].State = domain.ReceiptCommitted
	f.receipts[0].Response = &domain.EffectResponse{Status: 201, Body: []byte(`{"id":"ch_1"}`)}
	f.mu.Unlock()
	resp, err := api.Call(ctx, "POST", "charges/1", []byte(`{"amount":5}`), "application/json")
	if err != nil || resp.Status != 201 || string(resp.Body) != `{"id":"ch_1"}` || !resp.Replay {
		t.Fatalf("reuse: %+v %v", resp, err)
	}
	if f.count("write") != 1 {
		t.Fatalf("upstream called again: %d writes", f.count("write"))
	}
}

func TestStaleOwnerStopsTheWriter(t *testing.T) {
	for code, want := range map[domain.Code]State{
		domain.CodeStaleOwner: StateLost, domain.CodeFenceRegression: StateLost,
	} {
		f, l := held(t)
		w := l.Objects("bucket")
		f.refuseNext("write", code)
		_, err := w.Put(context.Background(), "jobs/a", strings.NewReader("x"), "")
		wantCode(t, err, code)
		wantState(t, l, want)
		_, err = w.Put(context.Background(), "jobs/b", strings.NewReader("y"), "")
		wantCode(t, err, domain.CodeLeaseNotHeld)
		if f.count("write") != 1 {
			t.Fatalf("%s: writer went on (%d writes)", code, f.count("write"))
		}
		if err := l.Tick(context.Background()); err != nil || f.count("renew") != 0 {
			t.Fatalf("%s: a lost lease was renewed", code)
		}
	}
}

func TestStatusInvalidOnWriteRefreshesTheProofOnce(t *testing.T) {
	f, l := held(t)
	f.refuseNext("write", domain.CodeStatusInvalid)
	if _, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), ""); err != nil {
		t.Fatalf("put: %v", err)
	}
	if f.count("status") != 1 || f.count("write") != 2 || f.writes[1].Get("Fence-Segment") != "1" {
		t.Fatalf("status %d writes %d", f.count("status"), f.count("write"))
	}
}

func TestRevokedEpochRefreshesTheGrantOnceThenStops(t *testing.T) {
	// Once: the registry re-issued the grant under a new epoch; the writer
	// refreshes and the commit goes through.
	f, l := held(t)
	w := l.Objects("bucket")
	f.refuseNext("write", domain.CodeEpochRevoked)
	if _, err := w.Put(context.Background(), "jobs/a", strings.NewReader("x"), ""); err != nil {
		t.Fatalf("after one EPOCH_REVOKED: %v", err)
	}
	if f.count("write") != 2 || f.count("status") != 1 {
		t.Fatalf("writes %d, status refreshes %d", f.count("write"), f.count("status"))
	}
	wantState(t, l, StateHeld)
	// Twice: the lease itself is revoked.
	f, l = held(t)
	w = l.Objects("bucket")
	f.refuseNext("write", domain.CodeEpochRevoked)
	f.refuseNext("write", domain.CodeEpochRevoked)
	_, err := w.Put(context.Background(), "jobs/a", strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeEpochRevoked)
	wantState(t, l, StateRevoked)
}

// TestSettledDoubtNeverMovesTheNumberingBack: a segment in doubt that
// turns out COMMITTED moves the next segment past it, never back below a
// number the owner set since (ResumeAt, or the segments Delegate handed
// out): the next write here goes out as segment 5, not 2, which a delegate
// may hold.
func TestSettledDoubtNeverMovesTheNumberingBack(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	f.loseNext("write")
	if _, err := l.Objects("bucket").Put(ctx, "jobs/a", strings.NewReader("x"), ""); !IsUncertain(err) {
		t.Fatalf("want uncertain, got %v", err)
	}
	l.ResumeAt(5)
	if _, err := l.Objects("bucket").Put(ctx, "jobs/b", strings.NewReader("y"), ""); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	got := f.writes[len(f.writes)-1].Get("Fence-Segment")
	f.mu.Unlock()
	if got != "5" {
		t.Fatalf("the write after the doubt settled COMMITTED went out as segment %s, want 5", got)
	}
}

// TestInternalAnswerLeavesTheSegmentInDoubt: INTERNAL implies nothing about
// the request (the gateway answers it for a fault anywhere, also after the
// effect was forwarded and settled), so the segment is in doubt, as after a
// lost answer: the next commit reads the receipts first, finds it
// COMMITTED and goes on at the next segment, where it was sent again as the
// same segment (and refused for good as another effect).
func TestInternalAnswerLeavesTheSegmentInDoubt(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	f.refuseNext("write", domain.CodeInternal)
	if _, err := l.Objects("bucket").Put(ctx, "jobs/a", strings.NewReader("x"), ""); domain.ErrorCode(err) != domain.CodeInternal {
		t.Fatalf("want INTERNAL, got %v", err)
	}
	if _, err := l.Objects("bucket").Put(ctx, "jobs/b", strings.NewReader("y"), ""); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	got := f.writes[len(f.writes)-1].Get("Fence-Segment")
	f.mu.Unlock()
	if got != "2" || f.count("receipts") != 1 {
		t.Fatalf("the write after an INTERNAL answer went out as segment %s after %d receipt listings; want 2 after 1", got, f.count("receipts"))
	}
}

// Rule: a doubt the receipts cannot settle (the list fails, or the lookup of
// the receipt the answer named fails otherwise than NOT_FOUND) refuses the
// next commit with that error: nothing is sent, and the segment in doubt and
// the numbering are kept; once the receipts answer, the commit after settles
// it (here COMMITTED: it goes at the segment after). A failed read taken
// for "nothing admitted" would send it at the admitted segment.
func TestADoubtTheReceiptsCannotSettleRefusesTheNextCommitAndIsKept(t *testing.T) {
	lost := func(t *testing.T, f *fakeGateway, l *Lease) { // R1 committed at segment 1, its answer lost
		f.loseNext("write")
		if _, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), ""); !IsUncertain(err) {
			t.Fatalf("want uncertain, got %v", err)
		}
	}
	for _, tc := range []struct {
		rule  string
		route string
		code  domain.Code
		doubt func(t *testing.T, f *fakeGateway, l *Lease)
	}{
		{"the list fails INTERNAL", "receipts", domain.CodeInternal, lost},
		{"the list fails BACKEND_UNAVAILABLE (503)", "receipts", domain.CodeBackendUnavailable, lost},
		{"the named receipt's lookup fails", "receipt", domain.CodeBackendUnavailable, func(t *testing.T, f *fakeGateway, l *Lease) {
			f.unlisted = append(f.unlisted, domain.Receipt{ID: "Rnamed", Lease: "L1", FenceToken: 7, Segment: 1, OperationID: "op-1",
				State: domain.ReceiptCommitted, Method: "PUT", Target: "objects/bucket/jobs/a"})
			e := newEffect("PUT", "objects/bucket/jobs/a", hexDigest("x"), nil)
			inDoubtAt(l, inDoubt{seg: 1, key: e.key, target: e.target, eff: &e, receipt: "Rnamed"})
		}},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			f, l := held(t)
			ctx := context.Background()
			tc.doubt(t, f, l)
			doubt, next, writes := *l.doubt, l.NextSegment(), f.count("write")
			f.refuseNext(tc.route, tc.code)
			_, err := l.Objects("bucket").Put(ctx, "jobs/b", strings.NewReader("y"), "")
			wantCode(t, err, tc.code)
			if f.count("write") != writes || l.NextSegment() != next || l.doubt == nil || *l.doubt != doubt {
				t.Fatalf("after the refused commit: %d writes (was %d), next segment %d (was %d), doubt %+v (was %+v)",
					f.count("write"), writes, l.NextSegment(), next, l.doubt, doubt)
			}
			if _, err := l.Objects("bucket").Put(ctx, "jobs/b", strings.NewReader("y"), ""); err != nil {
				t.Fatalf("once the receipts answer: %v", err)
			}
			f.mu.Lock()
			got := f.writes[len(f.writes)-1].Get("Fence-Segment")
			f.mu.Unlock()
			if got != "2" || l.doubt != nil {
				t.Fatalf("once the receipts answer, the write went at segment %s (doubt %+v); want 2, the doubt settled", got, l.doubt)
			}
		})
	}
}

// Rule: an effect whose answer was lost, found COMMITTED by another
// effect's commit, is answered with its receipt when it is retried (never
// sent again as a new segment: a second charge); once only, so the same
// effect committed after that is a new segment.
func TestALostCallSettledByAnotherIsRepliedOnItsRetry(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	api := l.API("payments")
	f.loseNext("write")
	if _, err := api.Call(ctx, "POST", "charges", []byte(`{"amount":5}`), "application/json"); !IsUncertain(err) {
		t.Fatalf("want uncertain, got %v", err)
	}
	if _, err := api.Call(ctx, "POST", "charges", []byte(`{"amount":7}`), "application/json"); err != nil {
		t.Fatal(err)
	}
	resp, err := api.Call(ctx, "POST", "charges", []byte(`{"amount":5}`), "application/json")
	if err != nil || !resp.Replay || f.count("write") != 2 {
		t.Fatalf("the retry of the lost call: %+v %v, %d writes sent, want its receipt and 2", resp, err, f.count("write"))
	}
	if _, err := api.Call(ctx, "POST", "charges", []byte(`{"amount":5}`), "application/json"); err != nil || f.count("write") != 3 {
		t.Fatalf("the same call once more: %v, %d writes sent, want a new segment (3)", err, f.count("write"))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, h := range f.writes {
		if h.Get("Fence-Segment") != fmt.Sprint(i+1) {
			t.Fatalf("write %d went out as segment %s", i, h.Get("Fence-Segment"))
		}
	}
}

// Rule: a lost delete that another write found COMMITTED is answered on its
// retry only until the object is written again: after a later write to the
// same key commits, the same delete is a new write (sent), never the old
// receipt while the object is back.
func TestAKeptReceiptOfAnObjectWriteIsForgottenOnceTheObjectIsWrittenAgain(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	objs := lostDeleteKept(t, f, l)
	if _, err := objs.Put(ctx, "x", strings.NewReader("new"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := objs.Delete(ctx, "x"); err != nil || f.count("write") != 4 {
		t.Fatalf("deleting x after it was written again: %v, %d writes sent, want 4 (the delete sent)", err, f.count("write"))
	}
}

// Rule: a segment in doubt because another effect held it (QUARANTINED) is
// settled for that effect's own retry: an effect whose answer was lost and
// whose admission became visible only after its doubt was cleared gets its
// receipt when retried, not a second send under a new segment.
func TestARetryFindsItsReceiptAtASegmentAnotherEffectMet(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	body := []byte(`{"amount":5}`)
	lateCharge(f, string(body), "ch_5")
	inDoubtAt(l, inDoubt{seg: 1, key: quarantinedSeg}) // another effect met segment 1 held
	resp, err := l.API("payments").Call(ctx, "POST", "charges", body, "application/json")
	if err != nil || !resp.Replay || string(resp.Body) != `{"id":"ch_5"}` || f.count("write") != 0 {
		t.Fatalf("the retry of the effect holding segment 1: %+v %v, %d writes, want its receipt and nothing sent", resp, err, f.count("write"))
	}
	if _, err := l.API("payments").Call(ctx, "POST", "charges", []byte(`{"amount":9}`), "application/json"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got := f.writes[len(f.writes)-1].Get("Fence-Segment"); got != "2" {
		t.Fatalf("the next effect went out as segment %s, want 2", got)
	}
}

// Rule: a kept receipt of an object write is forgotten also when a later
// write to that object is found committed while settling a doubt (not only
// when one is sent): a delete whose answer was lost, then a put of the same
// object whose answer was lost too, leave the delete to be sent again.
func TestAKeptReceiptIsForgottenWhenALaterWriteOfItsObjectIsFoundCommitted(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	objs := lostDeleteKept(t, f, l)
	f.loseNext("write")
	if _, err := objs.Put(ctx, "x", strings.NewReader("new"), ""); !IsUncertain(err) {
		t.Fatalf("want uncertain, got %v", err)
	}
	if _, err := objs.Put(ctx, "z", strings.NewReader("z"), ""); err != nil { // finds the put of x committed
		t.Fatal(err)
	}
	if _, err := objs.Delete(ctx, "x"); err != nil || f.count("write") != 5 {
		t.Fatalf("deleting x after its put was found committed: %v, %d writes sent, want 5 (the delete sent)", err, f.count("write"))
	}
}

// Rule: the receipt of the effect holding a QUARANTINED segment, found by
// another effect's commit, is kept for that effect's own retry (matched by
// its method, target and digest): sent later, it gets the receipt, not a
// second send.
func TestAQuarantinedSegmentsHolderFoundByAnotherKeepsItsReceipt(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	body := []byte(`{"amount":5}`)
	lateCharge(f, string(body), "ch_5")
	inDoubtAt(l, inDoubt{seg: 1, key: quarantinedSeg})
	if _, err := l.API("payments").Call(ctx, "POST", "charges", []byte(`{"amount":9}`), "application/json"); err != nil {
		t.Fatal(err)
	}
	resp, err := l.API("payments").Call(ctx, "POST", "charges", body, "application/json")
	if err != nil || !resp.Replay || string(resp.Body) != `{"id":"ch_5"}` || f.count("write") != 1 {
		t.Fatalf("the holder's retry after another effect settled its segment: %+v %v, %d writes, want its receipt and 1 write (the other's)", resp, err, f.count("write"))
	}
}

// Rule: a COMMITTED receipt found at the segment of an effect in doubt is
// that effect's only if it records it (method, target, digest): another
// effect's late admission holding the segment leaves the one in doubt to be
// sent again (it was not applied there), and is kept for its own retry.
func TestAReceiptAtTheSegmentInDoubtIsItsOnlyIfItRecordsIt(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	first, second := `{"amount":5}`, `{"amount":7}`
	lateCharge(f, first, "ch_5") // the first call, admitted late at segment 1
	e2 := newEffect("POST", "apis/payments/charges", hexDigest(second), nil)
	inDoubtAt(l, inDoubt{seg: 1, key: e2.key, target: e2.target, eff: &e2}) // the second, sent there, its answer lost
	resp, err := l.API("payments").Call(ctx, "POST", "charges", []byte(second), "application/json")
	if err != nil || resp.Replay || f.count("write") != 1 {
		t.Fatalf("the second call's retry: %+v %v, %d writes, want it sent (it was not applied)", resp, err, f.count("write"))
	}
	resp, err = l.API("payments").Call(ctx, "POST", "charges", []byte(first), "application/json")
	if err != nil || !resp.Replay || string(resp.Body) != `{"id":"ch_5"}` || f.count("write") != 1 {
		t.Fatalf("the first call's retry: %+v %v, %d writes, want its receipt and nothing sent", resp, err, f.count("write"))
	}
}

// lateCharge records, as the gateway would, a POST of charges with body
// committed at segment 1 of lease L1 (admitted late), answered {"id":id}.
func lateCharge(f *fakeGateway, body, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.receipts = append(f.receipts, domain.Receipt{ID: "Rlate", Lease: "L1", FenceToken: 7, Segment: 1, OperationID: "op-1",
		State: domain.ReceiptCommitted, Method: "POST", Target: "apis/payments/charges", PayloadDigest: "sha256:" + hexDigest(body),
		Response: &domain.EffectResponse{Status: 201, Body: []byte(`{"id":"` + id + `"}`)}})
}

// inDoubtAt puts a segment of l in doubt as d says.
func inDoubtAt(l *Lease, d inDoubt) {
	l.commitSem <- struct{}{}
	defer func() { <-l.commitSem }()
	l.doubt = &d
}

// lostDeleteKept deletes bucket/x with its answer lost, then puts bucket/y,
// whose commit finds the delete COMMITTED and keeps its receipt; it returns
// the writer.
func lostDeleteKept(t *testing.T, f *fakeGateway, l *Lease) *ObjectWriter {
	t.Helper()
	ctx := context.Background()
	objs := l.Objects("bucket")
	f.loseNext("write")
	if _, err := objs.Delete(ctx, "x"); !IsUncertain(err) {
		t.Fatalf("want uncertain, got %v", err)
	}
	if _, err := objs.Put(ctx, "y", strings.NewReader("y"), ""); err != nil {
		t.Fatal(err)
	}
	return objs
}
