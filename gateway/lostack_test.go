package gateway_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate"
)

// ackLosingStore loses the acknowledgement of its next lose admissions,
// committing them first when commit is set; calls counts Admit calls.
type ackLosingStore struct {
	fencegate.FenceStore
	lose   int
	commit bool
	calls  int
}

func (s *ackLosingStore) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	s.calls++
	if s.lose == 0 {
		return s.FenceStore.Admit(ctx, req)
	}
	s.lose--
	if s.commit {
		if _, err := s.FenceStore.Admit(ctx, req); err != nil {
			return fencegate.Admission{}, err
		}
	}
	return fencegate.Admission{}, fencegate.Errorf(fencegate.CodeInternal, "connection lost during commit")
}

func TestLostAdmissionAckIsRecoveredByTheReceiptID(t *testing.T) {
	for _, committed := range []bool{true, false} {
		f := newFixture(t)
		st := &ackLosingStore{FenceStore: f.store, lose: 1, commit: committed}
		res, err := f.gatewayOver(st).Apply(context.Background(), f.request(5, 1, "v1"))
		// Committed: the receipt is found and the effect goes on. Not
		// committed: NOT_FOUND under our receipt ID, so it is admitted again.
		if err != nil || res.Receipt.State != fencegate.ReceiptCommitted || f.content() != "v1" {
			t.Fatalf("committed=%v: admission with a lost ack: %+v %v (object %q)", committed, res.Receipt, err, f.content())
		}
		if want := map[bool]int{true: 1, false: 2}[committed]; st.calls != want {
			t.Fatalf("committed=%v: %d admissions, want %d", committed, st.calls, want)
		}
	}
}

// A replay of an accepted segment writes nothing, so a lost acknowledgement
// finds no receipt under the replay's own ID: the admission is tried again
// and answers the original receipt, never INTERNAL, forwarding nothing.
func TestLostAdmissionAckOfAReplayAnswersTheOriginalReceipt(t *testing.T) {
	f := newFixture(t)
	first, err := f.gw.Apply(context.Background(), f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	before := f.storedState()
	st := &ackLosingStore{FenceStore: f.store, lose: 1, commit: true}
	res, err := f.gatewayOver(st).Apply(context.Background(), f.request(5, 1, "v1"))
	if err != nil || !res.Replay || res.Receipt.ID != first.Receipt.ID || res.Receipt.State != fencegate.ReceiptCommitted {
		t.Fatalf("replay with a lost ack: %+v %v, want the original receipt %s", res, err, first.Receipt.ID)
	}
	if after := f.storedState(); after != before {
		t.Fatalf("stored state changed:\n%s\n%s", before, after)
	}
}

// A store that keeps failing without a verdict, and admitted nothing, is
// BACKEND_UNAVAILABLE (retry later) after a bounded number of tries: never
// INTERNAL for a store fault, and nothing stored or forwarded.
func TestAdmissionThatKeepsFailingWithoutAVerdictIsBackendUnavailable(t *testing.T) {
	f := newFixture(t)
	before := f.storedState()
	st := &ackLosingStore{FenceStore: f.store, lose: 1000}
	_, err := f.gatewayOver(st).Apply(context.Background(), f.request(5, 1, "v1"))
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("want BACKEND_UNAVAILABLE, got %v", err)
	}
	if st.calls < 2 || st.calls > 5 {
		t.Fatalf("%d admissions: want a bounded retry", st.calls)
	}
	if after := f.storedState(); after != before || f.content() != "" {
		t.Fatalf("stored state changed or forwarded:\n%s\n%s (object %q)", before, after, f.content())
	}
}
