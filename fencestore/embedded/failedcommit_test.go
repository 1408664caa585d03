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
	real := s.batch.update
	s.batch.update = func(fn func(*bolt.Tx) error) error {
		if err := real(fn); err != nil {
			return err
		}
		return errors.New("fdatasync: input/output error")
	}
	_, err := s.Admit(ctx, admitReq("res/a", 2, "r-2"))
	if err == nil {
		t.Fatal("an admission whose commit failed was answered as admitted")
	}
	s.batch.update = real
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
