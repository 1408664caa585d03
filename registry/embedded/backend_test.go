package embedded_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/embedded"
	"github.com/fencegate/fencegate/registry/leasetest"
)

func TestContract(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) fencegate.LeaseBackend {
		b, err := embedded.Open(filepath.Join(t.TempDir(), "registry.db"))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		return b
	})
}

func TestFencesSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	ctx := context.Background()
	b, err := embedded.Open(path)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	req := fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice", RequestID: "r1", TTL: time.Second, Now: leasetest.T0}
	first, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	b, err = embedded.Open(path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer b.Close()
	req = fencegate.AcquireRequest{LeaseID: "l2", Resource: "db/a", Owner: "bob", RequestID: "r2", TTL: time.Second, Now: leasetest.T0.Add(time.Second)}
	second, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("acquire after reopen: %v", err)
	}
	if second.FenceToken <= first.FenceToken || second.Revision <= first.Revision {
		t.Fatalf("sequence went back after reopen: %+v then %+v", first, second)
	}
}

func TestNewSharesDatabaseAndLeavesItOpen(t *testing.T) {
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "shared.db"), 0o600, nil)
	if err != nil {
		t.Fatalf("open bolt: %v", err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err }); err != nil {
		t.Fatalf("other bucket: %v", err)
	}
	b, err := embedded.New(db)
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if err := db.View(func(tx *bbolt.Tx) error {
		if tx.Bucket([]byte("other")) == nil {
			t.Error("other part's bucket is gone")
		}
		return nil
	}); err != nil {
		t.Fatalf("db closed by backend: %v", err)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	be, err := embedded.Open(filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatalf("open: %v", err)
	}
	defer be.Close()
	leasetest.BenchmarkAcquireRelease(b, be)
}
