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

// TestRecordsOfAFileWithoutExpiryIndexArePrunedAfterRetention checks the
// retention rule on a file written before the expiry index: opening it
// indexes the old records, so an acquisition past expiry + retention (here
// WithRetention's 2h) prunes them while the resource's fences keep rising.
func TestRecordsOfAFileWithoutExpiryIndexArePrunedAfterRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	ctx := context.Background()
	b, err := embedded.Open(path)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	old, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice", RequestID: "r1", TTL: time.Second, Now: leasetest.T0})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatalf("open bolt: %v", err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.DeleteBucket([]byte("registry.expiry")) }); err != nil {
		t.Fatalf("drop the index (a file of an older version): %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("close bolt: %v", err)
	}

	b, err = embedded.Open(path, embedded.WithRetention(2*time.Hour))
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer b.Close()
	now := leasetest.T0.Add(time.Second + 2*time.Hour)
	next, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l2", Resource: "db/b", Owner: "bob", RequestID: "r2", TTL: time.Second, Now: now})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := b.Lease(ctx, old.ID, now); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("old record past retention: want NOT_FOUND, got %v", err)
	}
	again, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l3", Resource: "db/a", Owner: "carol", RequestID: "r3", TTL: time.Second, Now: now})
	if err != nil || again.FenceToken != old.FenceToken+1 || next.FenceToken != 1 {
		t.Fatalf("fences after pruning: want db/a %d, db/b 1; got %d, %d (%v)", old.FenceToken+1, again.FenceToken, next.FenceToken, err)
	}
}
