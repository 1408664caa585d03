package embedded_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/embedded"
	"github.com/fencegate/fencegate/registry/leasetest"
)

// A file written before the highest fence was kept in the meta bucket gets
// it computed from the resources when opened.
func TestHighestFenceOfAnOlderFileIsComputedOnOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "registry.db")
	ctx := context.Background()
	b, err := embedded.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		l, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: fmt.Sprint("l", i), Resource: "db/a", Owner: "alice",
			RequestID: fmt.Sprint("r", i), TTL: time.Second, Now: leasetest.T0})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.Release(ctx, l.ID, "alice", leasetest.T0, fencegate.Guard{}); err != nil {
			t.Fatal(err)
		}
	}
	_ = b.Close()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("registry.meta")).Delete([]byte("maxfence")) }); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	if b, err = embedded.Open(path); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if inc, err := b.Incarnation(ctx); err != nil || inc.HighestFence != 3 {
		t.Fatalf("highest fence of the older file: %+v %v", inc, err)
	}
}
