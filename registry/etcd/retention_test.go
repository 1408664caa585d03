package etcd_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/registry/etcd"
	"github.com/fencegate/fencegate/registry/leasetest"
)

// TestRecordsOfAPrefixWithoutExpiryIndexArePrunedAfterRetention checks the
// retention rule on a prefix written before the expiry index: Open indexes
// the old records, so an acquisition past expiry + retention (WithRetention's
// 2h) prunes them while the resource's fences keep rising.
func TestRecordsOfAPrefixWithoutExpiryIndexArePrunedAfterRetention(t *testing.T) {
	c, prefix := client(t)
	ctx := context.Background()
	old, err := etcd.New(c, prefix).Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "r1", TTL: time.Second, Now: leasetest.T0})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	// What an older version wrote: no index, no mark.
	if _, err := c.Delete(ctx, prefix+"exp/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("drop the index: %v", err)
	}
	b, err := etcd.Open(ctx, []string{testenv.EtcdEndpoint(t)}, etcd.WithPrefix(prefix), etcd.WithRetention(2*time.Hour))
	if err != nil {
		t.Fatalf("open: %v", err)
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
	if n, _ := c.Get(ctx, prefix+"req/", clientv3.WithPrefix(), clientv3.WithCountOnly()); n.Count != 1 {
		t.Fatalf("want only the new request key left, found %d", n.Count)
	}
	again, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l3", Resource: "db/a", Owner: "carol", RequestID: "r3", TTL: time.Second, Now: now})
	if err != nil || again.FenceToken != old.FenceToken+1 || next.FenceToken != 1 {
		t.Fatalf("fences after pruning: want db/a %d, db/b 1; got %d, %d (%v)", old.FenceToken+1, again.FenceToken, next.FenceToken, err)
	}
}
