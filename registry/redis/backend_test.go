package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/registry/leasetest"
	"github.com/fencegate/fencegate/registry/redis"
)

// client connects to the test Redis; the prefix is random per test and every
// key under it is deleted when the test ends.
func client(t testing.TB) (goredis.UniversalClient, string) {
	t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: testenv.RedisAddr(t)})
	prefix := "{" + testenv.RandomName("fgtest-") + "}:"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		_ = c.Close()
	})
	return c, prefix
}

func backend(t testing.TB) *redis.Backend {
	c, prefix := client(t)
	return redis.New(c, prefix)
}

func TestContract(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) fencegate.LeaseBackend { return backend(t) })
}

func TestOpenPingsAndUsesThePrefix(t *testing.T) {
	c, prefix := client(t)
	ctx := context.Background()
	b, err := redis.Open(ctx, testenv.RedisAddr(t), redis.WithPrefix(prefix), redis.WithRetention(time.Hour), redis.AllowVolatile())
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer b.Close()
	l, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "r1", TTL: time.Minute, Now: leasetest.T0})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if n, _ := c.Exists(ctx, prefix+"lease:l1", prefix+"fence:db/a", prefix+"revision").Result(); n != 3 {
		t.Fatalf("want the lease, fence and revision keys under the prefix, found %d", n)
	}
	// The live key mirrors the lease with a server-side TTL; the record outlives it.
	live, _ := c.PTTL(ctx, prefix+"live:db/a").Result()
	rec, _ := c.PTTL(ctx, prefix+"lease:l1").Result()
	if live <= 0 || live > time.Minute || rec <= time.Hour {
		t.Fatalf("live key TTL %v (want ≤ lease TTL), record TTL %v (want > retention)", live, rec)
	}
	if _, _, err := b.Release(ctx, l.ID, l.Owner, leasetest.T0, fencegate.Guard{}); err != nil {
		t.Fatalf("release: %v", err)
	}
	if n, _ := c.Exists(ctx, prefix+"live:db/a").Result(); n != 0 {
		t.Fatal("release must drop the live key")
	}
}

// TestReleaseLeavesTheServerSideTTLAtExpiryPlusRetention checks the retention
// rule's backstop (leaserule.Forgotten: a record and its request ID live until
// expiry + retention): releasing a lease at once must not cut the server-side
// TTL of its record and request key to release time + retention, which would
// let a repeat of the request ID become a new acquisition a TTL early.
func TestReleaseLeavesTheServerSideTTLAtExpiryPlusRetention(t *testing.T) {
	c, prefix := client(t)
	ctx := context.Background()
	const ttl, retention = 50 * time.Minute, time.Hour
	b := redis.New(c, prefix, redis.WithRetention(retention))
	l, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "r1", TTL: ttl, Now: leasetest.T0})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, released, err := b.Release(ctx, l.ID, l.Owner, leasetest.T0, fencegate.Guard{}); err != nil || !released {
		t.Fatalf("release: released %v, %v", released, err)
	}
	// Set at acquisition to ttl + retention; released at once, so it must
	// still be well above retention alone (what a refresh at release sets).
	for _, key := range []string{prefix + "lease:l1", prefix + "req:5:alice:r1"} {
		got, err := c.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatalf("PTTL %s: %v", key, err)
		}
		if got <= retention+ttl/2 {
			t.Errorf("%s: server-side TTL after release %v, want about expiry + retention = %v", key, got, ttl+retention)
		}
	}
}

func TestOpenUnreachableIsBackendUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := redis.Open(ctx, "127.0.0.1:1", redis.WithRedisOptions(func(o *goredis.Options) { o.MaxRetries = -1 }))
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("want BACKEND_UNAVAILABLE, got %v", err)
	}
}

func TestFloorNearTheEndOfTheInt64RangeIsInvalid(t *testing.T) {
	b := backend(t)
	for _, floor := range []uint64{redis.MaxFence, redis.MaxFence - fencegate.MinFenceHeadroom + 1} {
		if err := b.SetFloor(context.Background(), floor, fencegate.Guard{}); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			t.Fatalf("floor %d: want INVALID_REQUEST, got %v", floor, err)
		}
	}
	if err := b.SetFloor(context.Background(), redis.MaxFence-fencegate.MinFenceHeadroom, fencegate.Guard{}); err != nil {
		t.Fatalf("the highest usable floor: %v", err)
	}
}

func TestFencesAbove2To53StayExact(t *testing.T) {
	b := backend(t)
	ctx := context.Background()
	const floor = uint64(1)<<53 + 1 // not representable as a Lua number
	if err := b.SetFloor(ctx, floor, fencegate.Guard{}); err != nil {
		t.Fatalf("set floor: %v", err)
	}
	for i, want := range []uint64{floor + 1, floor + 2} {
		l, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l" + string(rune('a'+i)), Resource: "db/a",
			Owner: "alice", RequestID: "r" + string(rune('a'+i)), TTL: time.Second, Now: leasetest.T0})
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if l.FenceToken != want {
			t.Fatalf("want fence %d, got %d", want, l.FenceToken)
		}
		if _, _, err := b.Release(ctx, l.ID, l.Owner, leasetest.T0, fencegate.Guard{}); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
}

func TestExhaustedFenceCounterFailsInsteadOfWrapping(t *testing.T) {
	c, prefix := client(t)
	b := redis.New(c, prefix)
	ctx := context.Background()
	c.Set(ctx, prefix+"fence:db/a", "9223372036854775807", 0)
	_, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "r1", TTL: time.Second, Now: leasetest.T0})
	if fencegate.ErrorCode(err) != fencegate.CodeInternal {
		t.Fatalf("want INTERNAL, got %v", err)
	}
	if _, err := b.Lease(ctx, "l1", leasetest.T0); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("failed acquire left a lease: %v", err)
	}
}

func TestTimeBefore1970IsInvalid(t *testing.T) {
	b := backend(t)
	_, err := b.Acquire(context.Background(), fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "r1", TTL: time.Second, Now: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)})
	if fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
		t.Fatalf("want INVALID_REQUEST, got %v", err)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	leasetest.BenchmarkAcquireRelease(b, backend(b))
}
