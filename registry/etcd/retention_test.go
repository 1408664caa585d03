package etcd_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

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

// roundTrips counts the unary gRPC calls of the etcd clients dialled with
// dial(): each is one round trip to the cluster (a retried call counts once
// per attempt).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) dial() grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		r.n.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

// count is the round trips f makes.
func (r *roundTrips) count(f func()) int64 {
	before := r.n.Load()
	f()
	return r.n.Load() - before
}

// acquireOld acquires n leases of TTL 1s at leasetest.T0 on resources of
// their own, leases old0 … old<n-1>.
func acquireOld(t *testing.T, b *etcd.Backend, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprint("old", i)
		if _, err := b.Acquire(context.Background(), fencegate.AcquireRequest{LeaseID: id, Resource: "db/" + id, Owner: "alice",
			RequestID: id, TTL: time.Second, Now: leasetest.T0}); err != nil {
			t.Fatalf("acquire %s: %v", id, err)
		}
	}
}

// keys is how many keys of c lie under prefix.
func keys(t *testing.T, c *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count %s: %v", prefix, err)
	}
	return resp.Count
}

// TestPruningABatchCostsAFewRoundTripsNotOnePerRecord checks the retention
// rule's pruning cost: an acquisition that deletes leaserule.PruneBatch (16)
// records past expiry + retention reads their records and request keys in
// batches, so it makes at most two round trips more than one that prunes
// nothing (not one per record and request key: each lengthens the decision
// the revision compare guards, and a conflict repeats it).
func TestPruningABatchCostsAFewRoundTripsNotOnePerRecord(t *testing.T) {
	var rt roundTrips
	c, prefix := client(t, rt.dial())
	ctx := context.Background()
	b := etcd.New(c, prefix, etcd.WithRetention(time.Hour))
	acquireOld(t, b, 16)
	acquire := func(id string, now time.Time) {
		if _, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: id, Resource: "db/" + id, Owner: "bob",
			RequestID: id, TTL: time.Second, Now: now}); err != nil {
			t.Fatalf("acquire %s: %v", id, err)
		}
	}
	none := rt.count(func() { acquire("none", leasetest.T0.Add(time.Minute)) })
	if n := keys(t, c, prefix+"lease/"); n != 17 {
		t.Fatalf("nothing is past retention yet: want 17 records, found %d", n)
	}
	sixteen := rt.count(func() { acquire("sixteen", leasetest.T0.Add(2*time.Hour)) })
	if n := keys(t, c, prefix+"lease/"); n != 2 {
		t.Fatalf("want the 16 old records pruned, leaving 2, found %d", n)
	}
	if n := keys(t, c, prefix+"req/"); n != 2 {
		t.Fatalf("want the 16 old request keys pruned, leaving 2, found %d", n)
	}
	if sixteen > none+2 {
		t.Fatalf("an acquisition pruning 16 records made %d round trips, one pruning none %d: want at most 2 more", sixteen, none)
	}
}

// TestOpenIndexesAnOldPrefixInBatchesAndEveryRecordIsPruned checks the
// retention rule on a prefix of more records than one transaction holds
// (etcd's default 128 operations) written before the expiry index: Open
// indexes them in batched transactions (a few round trips, not one per
// record), and acquisitions past expiry + retention then prune every one of
// them, leaserule.PruneBatch at a time.
func TestOpenIndexesAnOldPrefixInBatchesAndEveryRecordIsPruned(t *testing.T) {
	const records = 300
	c, prefix := client(t)
	ctx := context.Background()
	acquireOld(t, etcd.New(c, prefix), records)
	// What an older version wrote: no index, no mark.
	if _, err := c.Delete(ctx, prefix+"exp", clientv3.WithPrefix()); err != nil {
		t.Fatalf("drop the index: %v", err)
	}
	var rt roundTrips
	var b *etcd.Backend
	n := rt.count(func() {
		var err error
		b, err = etcd.Open(ctx, []string{testenv.EtcdEndpoint(t)}, etcd.WithPrefix(prefix), etcd.WithRetention(2*time.Hour),
			etcd.WithConfig(func(c *clientv3.Config) { c.DialOptions = append(c.DialOptions, rt.dial()) }))
		if err != nil {
			t.Fatalf("open: %v", err)
		}
	})
	defer b.Close()
	if n > 12 {
		t.Fatalf("Open made %d round trips to index %d records: want them batched, 128 a transaction", n, records)
	}
	if got := keys(t, c, prefix+"exp/"); got != records {
		t.Fatalf("want %d index entries, found %d", records, got)
	}
	now := leasetest.T0.Add(time.Second + 2*time.Hour)
	for i := 0; keys(t, c, prefix+"lease/") > int64(i); i++ {
		if i > records/16+1 {
			t.Fatalf("after %d acquisitions old records are left: %d records", i, keys(t, c, prefix+"lease/"))
		}
		id := fmt.Sprint("new", i)
		if _, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: id, Resource: "db/" + id, Owner: "bob",
			RequestID: id, TTL: time.Second, Now: now}); err != nil {
			t.Fatalf("acquire: %v", err)
		}
	}
	if got := keys(t, c, prefix+"req/"); got != keys(t, c, prefix+"lease/") {
		t.Fatalf("want only the new request keys left, found %d", got)
	}
}

// TestPruneBetweenAnAcquisitionsReadAndCommitMakesItReadAgain checks that
// Prune, which moves no revision, is still serialised with the other
// mutations: it rewrites the revision key as it is, so an acquisition that
// read a forgotten record before a prune deleted it (here the resource's
// last lease, which it would write back as superseded) fails its compare
// and decides again, rather than bring the deleted record back with no
// index entry to prune it by.
func TestPruneBetweenAnAcquisitionsReadAndCommitMakesItReadAgain(t *testing.T) {
	ctx := context.Background()
	plain, prefix := client(t)
	pruner := etcd.New(plain, prefix, etcd.WithRetention(time.Hour))
	var armed atomic.Bool
	var pruned atomic.Int64
	stall := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if txn, ok := req.(*etcdserverpb.TxnRequest); ok && len(txn.Compare) > 0 && armed.CompareAndSwap(true, false) {
			n, err := pruner.Prune(ctx, leasetest.T0.Add(time.Second+time.Hour), fencegate.Guard{})
			if err != nil {
				t.Errorf("prune: %v", err)
			}
			pruned.Store(int64(n))
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{testenv.EtcdEndpoint(t)}, DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{stall}})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer c.Close()
	b := etcd.New(c, prefix, etcd.WithRetention(time.Hour))
	old, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "old", Resource: "db/a", Owner: "alice", RequestID: "r1",
		TTL: time.Second, Now: leasetest.T0}) // expires, never released: stored HELD
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	armed.Store(true)
	now := leasetest.T0.Add(time.Second + time.Hour)
	next, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "next", Resource: "db/a", Owner: "bob", RequestID: "r2",
		TTL: time.Second, Now: now})
	if err != nil || next.FenceToken != old.FenceToken+1 {
		t.Fatalf("acquire past retention: want fence %d, got %+v, %v", old.FenceToken+1, next, err)
	}
	if pruned.Load() != 1 {
		t.Fatalf("the prune between the acquisition's read and commit deleted %d records, want 1", pruned.Load())
	}
	if _, err := b.Lease(ctx, old.ID, now); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("the pruned record: want NOT_FOUND, got %v", err)
	}
	if n := keys(t, plain, prefix+"lease/"); n != 1 {
		t.Fatalf("want only the new lease record, found %d", n)
	}
}
