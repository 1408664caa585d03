package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/registry/leasetest"
	"github.com/fencegate/fencegate/registry/redis"
)

func TestOpenRefusesAServerThatDoesNotFsyncEveryWrite(t *testing.T) {
	ctx := context.Background()
	volatile := testenv.OwnRedis(t)
	_, err := redis.Open(ctx, volatile.Addr())
	if fencegate.ErrorCode(err) != fencegate.CodeUnsupported {
		t.Fatalf("volatile server: want UNSUPPORTED, got %v", err)
	}
	b, err := redis.Open(ctx, volatile.Addr(), redis.AllowVolatile())
	if err != nil {
		t.Fatalf("volatile server, explicitly allowed: %v", err)
	}
	_ = b.Close()
	durable := testenv.OwnRedis(t, testenv.RedisDurable())
	b, err = redis.Open(ctx, durable.Addr())
	if err != nil {
		t.Fatalf("durable server: %v", err)
	}
	_ = b.Close()
}

func TestMutationNotAcknowledgedByReplicasIsUnavailable(t *testing.T) {
	ctx := context.Background()
	r := testenv.OwnRedis(t, testenv.RedisDurable())
	b, err := redis.Open(ctx, r.Addr(), redis.WithReplicas(1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "r1", TTL: time.Minute, Now: leasetest.T0})
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("no replica acknowledged: want BACKEND_UNAVAILABLE, got %v", err)
	}
}

// acquireUnder acquires db/a under the incarnation inc expects.
func acquireUnder(ctx context.Context, b *redis.Backend, n int, inc fencegate.Incarnation) (fencegate.Lease, error) {
	return b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: fmt.Sprintf("l%d", n), Resource: fmt.Sprintf("db/%d", n),
		Owner: "alice", RequestID: fmt.Sprintf("r%d", n), TTL: time.Minute, Now: leasetest.T0,
		Guard: fencegate.Guard{Incarnation: inc.ID, MinRevision: inc.Revision}})
}

func TestServerRestartedEmptyIsStateLostBeforeAnyFence(t *testing.T) {
	ctx := context.Background()
	r := testenv.OwnRedis(t)
	b, err := redis.Open(ctx, r.Addr(), redis.AllowVolatile())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	inc, err := b.Claim(ctx, "", "inc-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acquireUnder(ctx, b, 1, inc); err != nil {
		t.Fatal(err)
	}
	r.RestartEmpty()
	_, err = acquireUnder(ctx, b, 2, inc)
	if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("after an empty restart: want COORDINATION_STATE_LOST, got %v", err)
	}
	if now, err := b.Incarnation(ctx); err != nil || now != (fencegate.Incarnation{}) {
		t.Fatalf("the refused acquire wrote state: %+v %v", now, err)
	}
}

func TestServerRestoredFromAnOlderDumpIsStateLostBeforeAnyFence(t *testing.T) {
	ctx := context.Background()
	r := testenv.OwnRedis(t, testenv.RedisDurable())
	b, err := redis.Open(ctx, r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	inc, err := b.Claim(ctx, "", "inc-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	snap := r.Save()
	l, err := acquireUnder(ctx, b, 1, inc)
	if err != nil {
		t.Fatal(err)
	}
	inc.Revision = l.Revision // what the registry has seen
	r.RestoreRDB(snap)
	_, err = acquireUnder(ctx, b, 2, inc)
	if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("after restoring an older dump: want COORDINATION_STATE_LOST, got %v", err)
	}
}
