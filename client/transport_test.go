package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/domain"
)

// sdk is an SDK on a Transport over the fake gateway's lease L1.
type sdk struct {
	t  *testing.T
	f  *fakeGateway
	hc *http.Client
}

func newSDK(t *testing.T) *sdk {
	f, c := newFake(t)
	l, err := c.AcquireLease(context.Background(), LeaseParams{AcquireParams: AcquireParams{Resource: "bucket/jobs",
		RequestID: "r-1", TTL: time.Minute, OperationID: "op-1"}})
	if err != nil {
		t.Fatal(err)
	}
	return &sdk{t: t, f: f, hc: &http.Client{Transport: &Transport{Lease: l, API: "pay"}}}
}

// post is what an SDK sends: its own base URL, secret and idempotency key.
func (s *sdk) post(key, body string) (*http.Response, error) {
	req, _ := http.NewRequest("POST", "https://api.example.com/v1/charges", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk_secret_of_the_sdk")
	req.Header.Set("Idempotency-Key", key)
	resp, err := s.hc.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return resp, err
}

// segments lists the Fence-Segment and Fence-Effect-Key of every write the gateway saw.
func (s *sdk) segments() []string {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	var out []string
	for _, h := range s.f.writes {
		out = append(out, h.Get("Fence-Segment")+":"+h.Get("Fence-Effect-Key"))
	}
	return out
}

func (s *sdk) wantSegments(want ...string) {
	s.t.Helper()
	if got := s.segments(); strings.Join(got, " ") != strings.Join(want, " ") {
		s.t.Fatalf("writes (segment:key) = %v, want %v", got, want)
	}
}

func TestTransportLostAnswerThenTheSameKeyReplaysItsSegment(t *testing.T) {
	s := newSDK(t)
	s.f.loseNext("write")
	if _, err := s.post("k1", "a=1"); !IsUncertain(err) {
		t.Fatalf("lost answer: %v, want an uncertain error", err)
	}
	resp, err := s.post("k1", "a=1")
	if err != nil || resp.Header.Get("Fence-Replay") != "true" {
		t.Fatalf("retry under the key: %v %v", resp, err)
	}
	if _, err := s.post("k2", "a=2"); err != nil {
		t.Fatal(err)
	}
	s.wantSegments("1:k1", "1:k1", "2:k2")
}

func TestTransportLostAnswerThenAnotherKeySettlesTheDoubtFirst(t *testing.T) {
	s := newSDK(t)
	s.f.loseNext("write")
	if _, err := s.post("k1", "a=1"); !IsUncertain(err) {
		t.Fatalf("lost answer: %v", err)
	}
	if _, err := s.post("k2", "a=2"); err != nil { // receipts say segment 1 is committed
		t.Fatal(err)
	}
	if resp, err := s.post("k1", "a=1"); err != nil || resp.Header.Get("Fence-Replay") != "true" {
		t.Fatalf("k1 again: %v %v", resp, err)
	}
	s.wantSegments("1:k1", "2:k2", "1:k1")
	if s.f.count("receipts") != 2 { // the ledger once, the doubt once
		t.Fatalf("receipt listings = %d, want 2", s.f.count("receipts"))
	}
}

func TestTransportUnsettledKeyHoldsBackOthersUntilItIsNotApplied(t *testing.T) {
	s := newSDK(t)
	s.f.refuseNext("write", domain.CodeMutationUnknown)
	_, err := s.post("k1", "a=1")
	var fe *domain.Error
	if !errors.As(err, &fe) || fe.Code != domain.CodeMutationUnknown || fe.ReceiptID != "R1" {
		t.Fatalf("unknown outcome: %v", err)
	}
	if _, err := s.post("k2", "a=2"); domain.ErrorCode(err) != domain.CodeMutationUnknown {
		t.Fatalf("another key while k1 is UNKNOWN: %v, want MUTATION_UNKNOWN without a send", err)
	}
	s.wantSegments("1:k1")
	s.f.settle("R1", domain.ReceiptNotApplied) // the reconciler proves k1 never happened
	if _, err := s.post("k2", "a=2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.post("k1", "a=1"); err != nil {
		t.Fatal(err)
	}
	s.wantSegments("1:k1", "1:k2", "2:k1")
}

func TestTransportFindsKeysOfEarlierProcessesAndOwnersInTheLedger(t *testing.T) {
	f, c := newFake(t)
	f.receipts = []domain.Receipt{
		{ID: "R0", Lease: "L0", FenceToken: 6, Segment: 4, EffectKey: "old", OperationID: "op-1", State: domain.ReceiptCommitted,
			Response: &domain.EffectResponse{Status: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"id":"ch_0"}`)}},
		{ID: "Rx", Lease: "L0", FenceToken: 6, Segment: 5, EffectKey: "lost", OperationID: "op-1", State: domain.ReceiptUnknown},
		{ID: "R1", Lease: "L1", FenceToken: 7, Segment: 1, EffectKey: "k1", OperationID: "op-1", State: domain.ReceiptCommitted},
		{ID: "R2", Lease: "L1", FenceToken: 7, Segment: 2, EffectKey: "k2", OperationID: "op-1", State: domain.ReceiptCommitted},
	}
	f.writes = make([]http.Header, 2) // the earlier process's two writes
	l, err := c.AcquireLease(context.Background(), LeaseParams{AcquireParams: AcquireParams{Resource: "bucket/jobs",
		RequestID: "r-1", TTL: time.Minute, OperationID: "op-1"}})
	if err != nil {
		t.Fatal(err)
	}
	s := &sdk{t: t, f: f, hc: &http.Client{Transport: &Transport{Lease: l, API: "pay"}}}

	resp, err := s.post("old", "a=0")
	if err != nil || resp.StatusCode != 201 || resp.Header.Get("Fence-Receipt") != "R0" {
		t.Fatalf("an earlier owner's committed key: %v %v", resp, err)
	}
	if _, err := s.post("lost", "a=9"); domain.ErrorCode(err) != domain.CodeMutationUnknown {
		t.Fatalf("an earlier owner's unsettled key: %v, want MUTATION_UNKNOWN, never a resend under fence 7", err)
	}
	if _, err := s.post("k1", "a=1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.post("k3", "a=3"); err != nil {
		t.Fatal(err)
	}
	got := s.segments()[2:]
	if strings.Join(got, " ") != "1:k1 3:k3" {
		t.Fatalf("writes after the restart = %v, want k1 replayed at 1 and k3 at 3", got)
	}
}

func TestTransportSurfacesRefusalsAsErrorsAndReadsWithoutFence(t *testing.T) {
	s := newSDK(t)
	s.f.refuseNext("write", domain.CodeStaleOwner)
	_, err := s.post("k1", "a=1")
	var fe *domain.Error
	if !errors.As(err, &fe) || fe.Code != domain.CodeStaleOwner {
		t.Fatalf("refusal: %v, want STALE_OWNER through net/http's error", err)
	}
	req, _ := http.NewRequest("GET", "https://api.example.com/v1/charges/ch_1?expand=x", nil)
	req.Header.Set("Authorization", "Bearer sk_secret_of_the_sdk")
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var seen map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&seen); err != nil || seen["query"] != "expand=x" || seen["auth"] != "Bearer tok" {
		t.Fatalf("read reached the gateway as %v (%v): want the query and the workload credential", seen, err)
	}
}

// TestTransportKeyAnEarlierOwnerLandedAfterTheLedgerWasReadIsNotSentAgain:
// an earlier owner's write of a key may land after this lease read its
// ledger (its status proof still fresh; here the first send is
// RESOURCE_BUSY on it). Until a segment of this lease is admitted, a key
// the ledger does not know is looked up again before it is sent: the retry
// answers the earlier owner's COMMITTED receipt and sends nothing, where it
// was sent again under fence 7 (a second effect under a new upstream key).
func TestTransportKeyAnEarlierOwnerLandedAfterTheLedgerWasReadIsNotSentAgain(t *testing.T) {
	s := newSDK(t)
	s.f.refuseNext("write", domain.CodeResourceBusy)
	if _, err := s.post("charge-7", "a=7"); domain.ErrorCode(err) != domain.CodeResourceBusy {
		t.Fatalf("first send while the earlier owner's write is pending: %v, want RESOURCE_BUSY", err)
	}
	s.f.mu.Lock()
	s.f.receipts = append(s.f.receipts, domain.Receipt{ID: "R0", Lease: "L0", FenceToken: 6, Segment: 3, EffectKey: "charge-7",
		OperationID: "op-1", State: domain.ReceiptCommitted,
		Response: &domain.EffectResponse{Status: 201, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(`{"id":"ch_7"}`)}})
	s.f.mu.Unlock()
	resp, err := s.post("charge-7", "a=7")
	if err != nil || resp.StatusCode != 201 || resp.Header.Get("Fence-Receipt") != "R0" {
		t.Fatalf("the retry once the earlier owner's write committed: %v %v; want its receipt R0, nothing sent", resp, err)
	}
	s.wantSegments("1:charge-7") // the refused first send only
}

// TestTransportEarlierOwnersUnsettledKeyIsReadAgain: an earlier owner's
// receipt of a key, UNKNOWN when the ledger was read, is read again on the
// next commit of that key: once the reconciler has settled it COMMITTED the
// key answers that receipt, where it stayed MUTATION_UNKNOWN for the
// lease's life; once NOT_APPLIED the key is sent under this lease.
func TestTransportEarlierOwnersUnsettledKeyIsReadAgain(t *testing.T) {
	s := newSDK(t)
	s.f.mu.Lock()
	s.f.receipts = []domain.Receipt{
		{ID: "Ra", Lease: "L0", FenceToken: 6, Segment: 4, EffectKey: "a", OperationID: "op-1", State: domain.ReceiptUnknown},
		{ID: "Rb", Lease: "L0", FenceToken: 6, Segment: 5, EffectKey: "b", OperationID: "op-1", State: domain.ReceiptUnknown},
	}
	s.f.mu.Unlock()
	for _, key := range []string{"a", "b"} {
		if _, err := s.post(key, "x=1"); domain.ErrorCode(err) != domain.CodeMutationUnknown {
			t.Fatalf("%s while the earlier owner's receipt is UNKNOWN: %v, want MUTATION_UNKNOWN", key, err)
		}
	}
	s.f.settle("Ra", domain.ReceiptCommitted)
	s.f.settle("Rb", domain.ReceiptNotApplied)
	if resp, err := s.post("a", "x=1"); err != nil || resp.Header.Get("Fence-Receipt") != "Ra" {
		t.Fatalf("a once its receipt is COMMITTED: %v %v; want Ra's answer, nothing sent", resp, err)
	}
	if _, err := s.post("b", "x=1"); err != nil {
		t.Fatalf("b once its receipt is NOT_APPLIED: %v", err)
	}
	s.wantSegments("1:b")
}

// TestTransportEarlierOwnersCompactedKeyStaysUnknown: an earlier owner's
// receipt of a key, unsettled when the ledger was read and compacted since
// (its settled state no longer readable), keeps the key MUTATION_UNKNOWN:
// never resent under this grant, and not a NOT_FOUND for the SDK.
func TestTransportEarlierOwnersCompactedKeyStaysUnknown(t *testing.T) {
	s := newSDK(t)
	s.f.mu.Lock()
	s.f.receipts = []domain.Receipt{{ID: "Ra", Lease: "L0", FenceToken: 6, Segment: 4, EffectKey: "a", OperationID: "op-1", State: domain.ReceiptUnknown}}
	s.f.mu.Unlock()
	if _, err := s.post("a", "x=1"); domain.ErrorCode(err) != domain.CodeMutationUnknown {
		t.Fatalf("a while the earlier owner's receipt is UNKNOWN: %v", err)
	}
	s.f.mu.Lock()
	s.f.receipts = nil // settled, then compacted
	s.f.mu.Unlock()
	if _, err := s.post("a", "x=1"); domain.ErrorCode(err) != domain.CodeMutationUnknown {
		t.Fatalf("a once its receipt is compacted: %v, want MUTATION_UNKNOWN", err)
	}
	s.wantSegments()
}

// Rule: an effect key an earlier owner committed for another request (its
// receipt names another method or body) is INVALID_REQUEST and sends
// nothing, never that request's stored answer; the same request under it
// is answered from its receipt.
func TestTransportKeyUsedForAnotherRequestIsRefused(t *testing.T) {
	f, c := newFake(t)
	f.receipts = []domain.Receipt{
		{ID: "R0", Lease: "L0", FenceToken: 6, Segment: 4, EffectKey: "order-1", OperationID: "op-1", State: domain.ReceiptCommitted,
			Method: "POST", Target: "apis/pay/v1/charges", PayloadDigest: "sha256:" + hexDigest("amount=5"),
			Response: &domain.EffectResponse{Status: 201, Body: []byte(`{"id":"ch_0"}`)}},
	}
	f.writes = make([]http.Header, 1)
	l, err := c.AcquireLease(context.Background(), LeaseParams{AcquireParams: AcquireParams{Resource: "bucket/jobs",
		RequestID: "r-1", TTL: time.Minute, OperationID: "op-1"}})
	if err != nil {
		t.Fatal(err)
	}
	s := &sdk{t: t, f: f, hc: &http.Client{Transport: &Transport{Lease: l, API: "pay"}}}
	if _, err := s.post("order-1", "amount=9"); domain.ErrorCode(err) != domain.CodeInvalidRequest {
		t.Fatalf("the key of a committed charge reused with another body: %v, want INVALID_REQUEST", err)
	}
	if len(s.segments()) != 1 {
		t.Fatalf("writes sent for a refused key: %v", s.segments()[1:])
	}
	resp, err := s.post("order-1", "amount=5")
	if err != nil || resp.StatusCode != 201 || resp.Header.Get("Fence-Receipt") != "R0" {
		t.Fatalf("the same request under its key: %v %v, want R0's answer", resp, err)
	}
}

// Rule: a QUARANTINED answer at the next segment (another effect of the
// grant holds it, answered after this lease last read the receipts) puts
// the segment in doubt: the next key is numbered past it, not sent at it
// again.
func TestTransportQuarantinedAtTheNextSegmentNumbersPastIt(t *testing.T) {
	s := newSDK(t)
	if _, err := s.post("k1", "a=1"); err != nil {
		t.Fatal(err)
	}
	s.f.mu.Lock() // an earlier send of this grant, admitted late at segment 2
	s.f.receipts = append(s.f.receipts, domain.Receipt{ID: "Rlate", Lease: "L1", FenceToken: 7, Segment: 2, EffectKey: "late",
		OperationID: "op-1", State: domain.ReceiptCommitted})
	s.f.mu.Unlock()
	if _, err := s.post("k2", "a=2"); domain.ErrorCode(err) != domain.CodeQuarantined {
		t.Fatalf("k2 at the segment the late send holds: %v, want QUARANTINED", err)
	}
	if _, err := s.post("k2", "a=2"); err != nil {
		t.Fatalf("k2 again: %v", err)
	}
	s.wantSegments("1:k1", "2:k2", "3:k2")
}
