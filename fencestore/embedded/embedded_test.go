package embedded_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/fencestore/storetest"
)

func open(t testing.TB, path string) *embedded.Store {
	t.Helper()
	s, err := embedded.Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return s
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) fencegate.FenceStore {
		return open(t, filepath.Join(t.TempDir(), "fence.db"))
	})
}

// TestReopenKeepsState: the file is the state; a second opener waits for the
// file lock and then fails instead of sharing the file.
func TestReopenKeepsState(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s := open(t, path)
	g := fencegate.VerifiedGrant{Grant: fencegate.Grant{
		Resource: "res/a", Owner: "o", Lease: "l", FenceToken: 1 << 63, OperationID: "op", OperationRoot: "r", IssuedAt: 1,
	}, Digest: "sha256:g"}
	now := time.UnixMilli(1_700_000_000_000).UTC()
	adm, err := s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: 1, Target: "res/a", Method: "PUT",
		PayloadDigest: "sha256:p", ReceiptID: "r1", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1", Now: now}); err != nil {
		t.Fatal(err)
	}

	// It fails for the lock held (bbolt's timeout waiting for it), not for
	// anything else.
	if _, err := embedded.Open(path); err == nil {
		t.Fatal("a second Open of a file in use succeeded")
	} else if fencegate.ErrorCode(err) != fencegate.CodeInternal || !errors.Is(err, bolterrors.ErrTimeout) {
		t.Fatalf("second Open: %v, want INTERNAL for the file lock's timeout", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	defer s.Close()
	row, err := s.Resource(ctx, "res/a")
	if err != nil || row.HighestFence != 1<<63 || row.LastSegmentSeq != 1 || row.PendingReceipt != "" {
		t.Fatalf("after reopen: %+v, %v", row, err)
	}
	if v, _ := s.Version(ctx, "res/a"); v != "v1" {
		t.Fatalf("version after reopen: %q", v)
	}
	if r, err := s.ReceiptAt(ctx, "res/a", 1<<63, 1); err != nil || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("receipt after reopen: %+v, %v", r, err)
	}
}

func BenchmarkAdmitSettle(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "fence.db"))
	defer s.Close()
	storetest.BenchAdmitSettle(b, s)
}

func BenchmarkAdmitSettleKeptRequest(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "fence.db"))
	defer s.Close()
	storetest.BenchAdmitSettleKeptRequest(b, s)
}

// BenchmarkAdmitSettleParallel runs 4 writers per CPU (8 on 2 cores), each on its own resource.
func BenchmarkAdmitSettleParallel(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "fence.db"))
	defer s.Close()
	b.SetParallelism(4)
	storetest.BenchAdmitSettleParallel(b, s)
	st := s.Stats()
	b.ReportMetric(float64(st.Ops)/float64(max(st.Commits, 1)), "ops/commit")
	b.ReportMetric(2*float64(st.Commits)/float64(b.N), "fdatasyncs/write")
}
