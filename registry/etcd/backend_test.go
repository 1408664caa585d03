package etcd_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/registry/etcd"
	"github.com/fencegate/fencegate/registry/leasetest"
)

// client connects to the test etcd with the dial options dial (for example
// a roundTrips counter); the prefix is random per test and deleted when the
// test ends.
func client(t testing.TB, dial ...grpc.DialOption) (*clientv3.Client, string) {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{testenv.EtcdEndpoint(t)}, DialTimeout: 5 * time.Second, DialOptions: dial})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	prefix := "/" + testenv.RandomName("fgtest-") + "/"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = c.Delete(ctx, prefix, clientv3.WithPrefix())
		_ = c.Close()
	})
	return c, prefix
}

func backend(t testing.TB) *etcd.Backend {
	c, prefix := client(t)
	return etcd.New(c, prefix)
}

func TestContract(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) fencegate.LeaseBackend { return backend(t) })
}

func TestLiveKeyCarriesAnEtcdLeaseUntilRelease(t *testing.T) {
	c, prefix := client(t)
	ctx := context.Background()
	b, err := etcd.Open(ctx, []string{testenv.EtcdEndpoint(t)}, etcd.WithPrefix(prefix))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer b.Close()
	l, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "r1", TTL: time.Minute, Now: leasetest.T0})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	resp, err := c.Get(ctx, prefix+"live/db/a")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "l1" || resp.Kvs[0].Lease == 0 {
		t.Fatalf("want live key l1 attached to an etcd lease, got %v %v", resp, err)
	}
	if _, _, err := b.Release(ctx, l.ID, l.Owner, leasetest.T0, fencegate.Guard{}); err != nil {
		t.Fatalf("release: %v", err)
	}
	if resp, _ := c.Get(ctx, prefix+"live/db/a"); len(resp.Kvs) != 0 {
		t.Fatal("release must drop the live key")
	}
}

func TestFencesUseTheFullUint64Range(t *testing.T) {
	b := backend(t)
	ctx := context.Background()
	const floor = uint64(1) << 63
	if err := b.SetFloor(ctx, floor, fencegate.Guard{}); err != nil {
		t.Fatalf("set floor: %v", err)
	}
	l, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "r1", TTL: time.Second, Now: leasetest.T0})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if l.FenceToken != floor+1 {
		t.Fatalf("want fence %d, got %d", floor+1, l.FenceToken)
	}
}

func TestUnreachableClusterIsBackendUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := etcd.Open(ctx, []string{"127.0.0.1:1"}, etcd.WithConfig(func(c *clientv3.Config) { c.DialTimeout = time.Second }))
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("want BACKEND_UNAVAILABLE, got %v", err)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	leasetest.BenchmarkAcquireRelease(b, backend(b))
}
