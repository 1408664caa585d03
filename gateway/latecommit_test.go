package gateway_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// lateCommitStore models a COMMIT whose acknowledgement was lost while the
// server had not yet made the transaction visible (e.g. Postgres waiting
// for a synchronous standby, or still flushing, when the client's
// connection broke): Admit commits but answers a fault, and the very next
// read of that receipt ID (the gateway's recovery read, on another
// connection) does not see it yet. Every later read sees it.
type lateCommitStore struct {
	fencegate.FenceStore
	mu     sync.Mutex
	lose   bool
	hidden map[string]bool
	admits int
	// lost, if set, runs when the lost commit is answered (time passing
	// while the store was slow, say).
	lost func()
}

func (s *lateCommitStore) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	s.mu.Lock()
	s.admits++
	lose := s.lose
	s.lose = false
	s.mu.Unlock()
	adm, err := s.FenceStore.Admit(ctx, req)
	if err != nil || !lose {
		return adm, err
	}
	s.mu.Lock()
	s.hidden[req.ReceiptID] = true
	s.mu.Unlock()
	if s.lost != nil {
		s.lost()
	}
	return fencegate.Admission{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "connection lost during COMMIT")
}

func (s *lateCommitStore) Receipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	s.mu.Lock()
	hide := s.hidden[id]
	delete(s.hidden, id)
	s.mu.Unlock()
	if hide {
		return fencegate.Receipt{}, fencegate.Errorf(fencegate.CodeNotFound, "receipt %s not found", id)
	}
	return s.FenceStore.Receipt(ctx, id)
}

// TestOwnAdmissionSeenLateGoesOnAsAdmitted: the recovery read does not see
// the receipt yet, so the admission is tried again under the same receipt
// ID and meets its own, now visible, admission. It is this request's own
// and nothing was forwarded for it: the gateway forwards it (the object
// holds v1, the receipt is COMMITTED, not a replay answered
// MUTATION_UNKNOWN with the receipt PENDING and the resource busy until the
// reconciler takes it for an orphan), and the next segment is admitted.
func TestOwnAdmissionSeenLateGoesOnAsAdmitted(t *testing.T) {
	f := newFixture(t)
	st := &lateCommitStore{FenceStore: f.store, lose: true, hidden: map[string]bool{}}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now, After: atOnce,
		Policy: gateway.StaticPolicy{Generation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil || res.Replay || f.content() != "v1" || st.admits != 2 {
		t.Fatalf("answer %+v, %v; object %q after %d admissions; want v1 written by the second attempt, not a replay", res, err, f.content(), st.admits)
	}
	if stored, err := f.store.Receipt(ctx, res.Receipt.ID); err != nil || stored.State != fencegate.ReceiptCommitted {
		t.Fatalf("receipt %+v, %v; want COMMITTED", stored, err)
	}
	if _, err := gw.Apply(ctx, f.request(5, 2, "v2")); err != nil || f.content() != "v2" {
		t.Fatalf("next segment: %v, object %q", err, f.content())
	}
}

// hiddenCommitStore commits every admission but answers each with a fault,
// and hides every receipt from reads while hide is set: an admission whose
// commit stays invisible through all the gateway's attempts.
type hiddenCommitStore struct {
	fencegate.FenceStore
	mu   sync.Mutex
	hide bool
}

func (s *hiddenCommitStore) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	if _, err := s.FenceStore.Admit(ctx, req); err != nil {
		return fencegate.Admission{}, err
	}
	return fencegate.Admission{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "connection lost during COMMIT")
}

func (s *hiddenCommitStore) Receipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	s.mu.Lock()
	hide := s.hide
	s.mu.Unlock()
	if hide {
		return fencegate.Receipt{}, fencegate.Errorf(fencegate.CodeNotFound, "receipt %s not found", id)
	}
	return s.FenceStore.Receipt(ctx, id)
}

// TestGivingUpOnAnAdmissionQueuesItsNotApplied: every attempt's commit
// stays invisible, so the gateway gives up (BACKEND_UNAVAILABLE, nothing
// forwarded); the receipt it may have admitted is queued NOT_APPLIED, and
// once the store answers it is settled so, which frees the resource for
// the segment's retry.
func TestGivingUpOnAnAdmissionQueuesItsNotApplied(t *testing.T) {
	f := newFixture(t)
	st := &hiddenCommitStore{FenceStore: f.store, hide: true}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now, After: atOnce,
		Policy: gateway.StaticPolicy{Generation: 1}, NewID: func() string { return "rcpt_hidden" }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := gw.Apply(ctx, f.request(5, 1, "v1")); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || f.content() != "" {
		t.Fatalf("%v, object %q; want BACKEND_UNAVAILABLE and nothing forwarded", err, f.content())
	}
	st.mu.Lock()
	st.hide = false
	st.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := gw.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	if r, err := f.store.Receipt(ctx, "rcpt_hidden"); err != nil || r.State != fencegate.ReceiptNotApplied {
		t.Fatalf("receipt %+v, %v; want NOT_APPLIED", r, err)
	}
	if rs, err := f.store.Resource(ctx, resource); err != nil || rs.PendingReceipt != "" {
		t.Fatalf("resource %+v, %v; want nothing pending", rs, err)
	}
}

// TestRefusalAfterAnUncertainAttemptSettlesItsReceipt: an admission attempt
// commits but its answer is lost and its receipt is not yet visible; before
// the next attempt the request's status proof has expired, so it is refused
// (STATUS_INVALID) with nothing forwarded. The late-visible receipt is
// settled NOT_APPLIED and the resource is free, not left PENDING (every
// write RESOURCE_BUSY or MUTATION_UNKNOWN) until the orphan pass.
func TestRefusalAfterAnUncertainAttemptSettlesItsReceipt(t *testing.T) {
	f := newFixture(t)
	st := &lateCommitStore{FenceStore: f.store, lose: true, hidden: map[string]bool{},
		lost: func() { f.kit.Advance(time.Minute) }} // the status proof expires meanwhile
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now, After: atOnce,
		Policy: gateway.StaticPolicy{Generation: 1}, NewID: func() string { return "rcpt_late" }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = gw.Apply(ctx, f.request(5, 1, "v1"))
	if err == nil || f.content() != "" {
		t.Fatalf("%v, object %q; want a refusal with nothing forwarded", err, f.content())
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = gw.Drain(dctx)
	r, rerr := f.store.Receipt(ctx, "rcpt_late")
	rs, _ := f.store.Resource(ctx, resource)
	if rerr != nil || r.State != fencegate.ReceiptNotApplied || rs.PendingReceipt != "" {
		t.Fatalf("receipt %+v (%v), resource pending on %q after the gateway answered %v; want NOT_APPLIED and nothing pending", r, rerr, rs.PendingReceipt, fencegate.ErrorCode(err))
	}
}
