package etcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/registry/etcd"
	"github.com/fencegate/fencegate/registry/leasetest"
)

func TestClusterRestoredFromAnOlderSnapshotIsStateLostBeforeAnyFence(t *testing.T) {
	e := testenv.OwnEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := etcd.Open(ctx, []string{e.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	acquire := func(id string, inc fencegate.Incarnation) (fencegate.Lease, error) {
		return b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: id, Resource: "db/a", Owner: "alice", RequestID: id,
			TTL: time.Second, Now: leasetest.T0.Add(time.Hour * time.Duration(len(id))), Guard: fencegate.Guard{Incarnation: inc.ID, MinRevision: inc.Revision}})
	}
	inc, err := b.Claim(ctx, "", "inc-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	snap := e.Snapshot()
	l, err := acquire("l1", inc)
	if err != nil {
		t.Fatal(err)
	}
	inc.Revision = l.Revision
	e.Restore(snap)
	before, err := b.Incarnation(ctx)
	if err != nil {
		t.Fatalf("incarnation after restore: %v", err)
	}
	if before.Revision >= l.Revision || before.ID != "inc-1" {
		t.Fatalf("the restore should keep the marker and go back in revision: %+v (lease revision %d)", before, l.Revision)
	}
	_, err = acquire("l22", inc)
	if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("after restoring an older snapshot: want COORDINATION_STATE_LOST, got %v", err)
	}
	if after, _ := b.Incarnation(ctx); after != before {
		t.Fatalf("the refused acquire changed the backend: %+v -> %+v", before, after)
	}
}

// Data written before the maxfence key existed: the highest fence is read
// from the resources, and the first acquire starts the key from there.
func TestHighestFenceOfOlderDataComesFromTheResources(t *testing.T) {
	c, prefix := client(t)
	b := etcd.New(c, prefix)
	ctx := context.Background()
	acquire := func(id, res string) {
		t.Helper()
		l, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: id, Resource: res, Owner: "alice", RequestID: id,
			TTL: time.Second, Now: leasetest.T0})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.Release(ctx, l.ID, "alice", leasetest.T0, fencegate.Guard{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"l1", "l2", "l3"} {
		acquire(id, "db/a")
	}
	if _, err := c.Delete(ctx, prefix+"maxfence"); err != nil {
		t.Fatal(err)
	}
	if inc, err := b.Incarnation(ctx); err != nil || inc.HighestFence != 3 {
		t.Fatalf("older data: %+v %v", inc, err)
	}
	acquire("l4", "db/b") // fence 1 of another resource
	if inc, err := b.Incarnation(ctx); err != nil || inc.HighestFence != 3 {
		t.Fatalf("after an acquire on older data: %+v %v", inc, err)
	}
}
