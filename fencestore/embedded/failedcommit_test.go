package embedded

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// Rule: after a commit that failed (a failed fdatasync: bbolt has already
// written the meta page, so the batch is visible in memory though no caller
// was told it committed), the store answers every write and read
// BACKEND_UNAVAILABLE until it is opened again, and the reopened store holds
// what the file holds.
func TestAFailedCommitFailsTheStoreUntilItIsReopened(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s := openAt(t, path)
	if _, err := s.Admit(ctx, admitReq("res/a", 1, "r-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(ctx, "r-1", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Failure(); err != nil {
		t.Fatalf("Failure before any failed commit: %v", err)
	}
	// The transaction commits, as one whose data reached the file does,
	// and its caller is told it failed, as a failed fdatasync tells it.
	real := s.batch.commitTx
	s.batch.commitTx = func(tx *bolt.Tx) error {
		if err := real(tx); err != nil {
			return err
		}
		return errors.New("fdatasync: input/output error")
	}
	_, err := s.Admit(ctx, admitReq("res/a", 2, "r-2"))
	if err == nil {
		t.Fatal("an admission whose commit failed was answered as admitted")
	}
	s.batch.commitTx = real
	if fencegate.ErrorCode(s.Failure()) != fencegate.CodeBackendUnavailable {
		t.Fatalf("Failure after a failed commit: %v, want BACKEND_UNAVAILABLE (for /healthz)", s.Failure())
	}
	if _, err := s.Admit(ctx, admitReq("res/b", 1, "r-b")); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("a write after the failed commit: %v, want BACKEND_UNAVAILABLE", err)
	}
	if rs, err := s.Resource(ctx, "res/a"); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("a read after the failed commit: %+v %v, want BACKEND_UNAVAILABLE (not the failed batch's state)", rs, err)
	}
	if _, err := s.Receipt(ctx, "r-2"); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("reading the failed batch's receipt: %v, want BACKEND_UNAVAILABLE", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened, the store reads the file again and serves; the write
	// refused after the failure left nothing.
	s = openAt(t, path)
	defer s.Close()
	if _, err := s.Resource(ctx, "res/b"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("res/b after its admission was refused BACKEND_UNAVAILABLE: %v, want NOT_FOUND", err)
	}
	if _, err := s.Receipt(ctx, "r-b"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("receipt r-b after its admission was refused: %v, want NOT_FOUND", err)
	}
	if _, err := s.Admit(ctx, admitReq("res/b", 1, "r-b")); err != nil {
		t.Fatalf("a write after reopening: %v", err)
	}
	if r, err := s.Receipt(ctx, "r-1"); err != nil || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("the receipt committed before the failure: %+v %v", r, err)
	}
}

// Rule: a journal move's commit that failed fails the store as a batch's
// does (its transaction may be in the page cache though not durable): the
// write whose batch committed before it stays admitted, and from the failed
// move on every write and read is BACKEND_UNAVAILABLE until the store is
// opened again, which finds every entry the file holds on one side of the
// journal or the other.
func TestAFailedJournalMoveCommitFailsTheStoreUntilItIsReopened(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s := openAt(t, path)
	if _, err := s.Admit(ctx, admitReq("res/a", 1, "r-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(ctx, "r-1", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1"}); err != nil {
		t.Fatal(err)
	}
	real := s.batch.commitTx
	calls := 0
	s.batch.commitTx = func(tx *bolt.Tx) error {
		calls++
		if err := real(tx); err != nil || calls == 1 { // the batch's own commit succeeds
			return err
		}
		return errors.New("fdatasync: input/output error") // the move's, after it reached the file
	}
	// A move after this batch: the third op since Open. Not 1, which the
	// committer could still read after the settle's batch, before this one.
	s.batch.mergeEvery.Store(3)
	if _, err := s.Admit(ctx, admitReq("res/a", 2, "r-2")); err != nil {
		t.Fatalf("the admission committed before the move: %v", err)
	}
	// The committer runs the move after answering the batch, and the next
	// call after the move: this one is refused.
	if _, err := s.Admit(ctx, admitReq("res/b", 1, "r-b")); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("a write after the failed move: %v, want BACKEND_UNAVAILABLE", err)
	}
	s.batch.commitTx = real
	if calls != 2 {
		t.Fatalf("%d write transactions, want the batch's and one move step", calls)
	}
	if fencegate.ErrorCode(s.Failure()) != fencegate.CodeBackendUnavailable {
		t.Fatalf("Failure after a failed move commit: %v, want BACKEND_UNAVAILABLE (for /healthz)", s.Failure())
	}
	if _, err := s.Receipt(ctx, "r-2"); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("a read after the failed move: %v, want BACKEND_UNAVAILABLE", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path)
	defer s.Close()
	if rs, err := s.Resource(ctx, "res/a"); err != nil || rs.LastSegmentSeq != 2 {
		t.Fatalf("res/a after reopening: %+v %v, want segment 2 (admitted before the move)", rs, err)
	}
	for _, id := range []string{"r-1", "r-2"} {
		if _, err := s.Receipt(ctx, id); err != nil {
			t.Fatalf("receipt %s after reopening: %v", id, err)
		}
	}
	if _, err := s.Receipt(ctx, "r-b"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("receipt r-b refused after the failure: %v, want NOT_FOUND", err)
	}
}
