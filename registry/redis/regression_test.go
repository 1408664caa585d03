package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/leasetest"
	"github.com/fencegate/fencegate/registry/redis"
	"github.com/fencegate/fencegate/registry/redis/redistest"
)

// TestRestoredSnapshotRegressesFences rolls the backend's Redis state back to
// an earlier DUMP: the backend then hands out a fence at or below one it
// already issued (what the gateway must answer with FENCE_REGRESSION), and
// only a floor above the highest fence issued brings fences back above it.
func TestRestoredSnapshotRegressesFences(t *testing.T) {
	c, prefix := client(t)
	b := redis.New(c, prefix)
	ctx := context.Background()
	n := 0
	cycle := func() uint64 { // acquire and release db/a once, returning the fence
		t.Helper()
		n++
		l, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: fmt.Sprintf("l%d", n), Resource: "db/a",
			Owner: "alice", RequestID: fmt.Sprintf("r%d", n), TTL: time.Minute, Now: leasetest.T0})
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if _, _, err := b.Release(ctx, l.ID, l.Owner, leasetest.T0, fencegate.Guard{}); err != nil {
			t.Fatalf("release: %v", err)
		}
		return l.FenceToken
	}
	cycle()
	cycle()
	snap, err := redistest.Snapshot(ctx, c, prefix)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if snap.Len() == 0 {
		t.Fatal("snapshot holds no keys")
	}
	var highest uint64
	for range 3 {
		highest = max(highest, cycle())
	}
	if err := snap.Restore(ctx, c); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if _, err := b.Lease(ctx, fmt.Sprintf("l%d", n), leasetest.T0); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("restore kept a lease created after the snapshot: %v", err)
	}
	if f := cycle(); f > highest {
		t.Fatalf("restored state should regress: fence %d is above the highest issued %d", f, highest)
	}
	if err := b.SetFloor(ctx, highest, fencegate.Guard{}); err != nil {
		t.Fatalf("set floor: %v", err)
	}
	for range 2 {
		if f := cycle(); f <= highest {
			t.Fatalf("after the floor: fence %d not above %d", f, highest)
		}
	}
}
