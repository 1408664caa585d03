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
			TTL: time.Second, Now: leasetest.T0.Add(time.Hour * time.Duration(len(id))), Incarnation: inc.ID, MinRevision: inc.Revision})
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
