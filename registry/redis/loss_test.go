package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/registry/leasetest"
	"github.com/fencegate/fencegate/registry/redis"
)

// TestOpenRefusesAServerThatDoesNotFsyncEveryWrite: a server that may lose
// acknowledged writes (no append-only file fsynced on every write) or evict
// keys (a maxmemory-policy other than noeviction) is refused at start unless
// explicitly allowed.
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
	for _, policy := range []string{"allkeys-lru", "volatile-lru", "volatile-ttl"} {
		if _, err := durable.Do("CONFIG", "SET", "maxmemory-policy", policy); err != nil {
			t.Fatal(err)
		}
		if _, err := redis.Open(ctx, durable.Addr()); fencegate.ErrorCode(err) != fencegate.CodeUnsupported ||
			!strings.Contains(err.Error(), "maxmemory-policy="+policy) {
			t.Fatalf("durable server that may evict keys (%s): want UNSUPPORTED naming the policy, got %v", policy, err)
		}
	}
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

// replicated starts a durable master with one replica in sync and returns
// the master, the replica, and a func opening a registry backend on the
// master that WAITs for the replica (up to wait), with opts.
func replicated(t *testing.T, wait time.Duration) (master, replica *testenv.Redis, open func(opts ...redis.Option) *redis.Backend) {
	t.Helper()
	master = testenv.OwnRedis(t, testenv.RedisDurable())
	replica = testenv.OwnRedis(t)
	replica.ReplicaOf(master)
	open = func(opts ...redis.Option) *redis.Backend {
		t.Helper()
		b, err := redis.Open(context.Background(), master.Addr(), append([]redis.Option{redis.WithReplicas(1, wait)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	return master, replica, open
}

// acquireN acquires db/<n> for alice (lease l<n>, request r<n>).
func acquireN(b *redis.Backend, n int) (fencegate.Lease, error) {
	return b.Acquire(context.Background(), fencegate.AcquireRequest{LeaseID: fmt.Sprintf("l%d", n), Resource: fmt.Sprintf("db/%d", n),
		Owner: "alice", RequestID: fmt.Sprintf("r%d", n), TTL: time.Minute, Now: leasetest.T0})
}

// TestAnswerWaitsForItsReplicasAlsoWhenTheScriptWroteNothing: with
// replicas=N a mutation is answered only once N replicas hold what it
// answers, also when its script wrote nothing because the state was written
// before (a request ID repeated after an answer lost to a WAIT that timed
// out), here through a second registry process whose connections never
// wrote. WAIT is documented to cover "the previous write commands sent by
// the current client"; the backend writes a mark of its own before it, so
// the rule holds by that wording (Redis 7 also moves a connection's offset
// with each command it runs, so there the script alone covers it).
func TestAnswerWaitsForItsReplicasAlsoWhenTheScriptWroteNothing(t *testing.T) {
	_, replica, open := replicated(t, 200*time.Millisecond)
	first := open()
	if _, err := acquireUntilAcknowledged(t, first, 1); err != nil {
		t.Fatalf("acquire with its replica up: %v", err)
	}
	replica.Freeze()
	defer replica.Thaw()
	if _, err := acquireN(first, 2); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("acquire while the replica acknowledges nothing: %v, want BACKEND_UNAVAILABLE", err)
	}
	second := open()
	if l, err := acquireN(second, 2); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("the same request again, through another registry, no replica holding it: fence %d, %v; want BACKEND_UNAVAILABLE", l.FenceToken, err)
	}
	replica.Thaw()
	if _, err := acquireUntilAcknowledged(t, second, 2); err != nil {
		t.Fatalf("the same request once the replica is back: %v", err)
	}
}

// acquireUntilAcknowledged is acquireN repeated (the same request ID, so
// one acquisition) while it answers BACKEND_UNAVAILABLE, for up to 10 s: a
// replica that is up acknowledges, but on a loaded machine not always
// within the backend's short WAIT, which is what makes the refusals above
// quick.
func acquireUntilAcknowledged(t *testing.T, b *redis.Backend, n int) (fencegate.Lease, error) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		l, err := acquireN(b, n)
		if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || time.Now().After(deadline) {
			return l, err
		}
	}
}

// TestAnswerWaitsForItsWriteWhicheverConnectionWAITRunsOn: WAIT counts the
// replicas that hold the last write of the connection it runs on, and a
// pooled client may run it on another connection than the script's. Here
// the pool hands out its oldest idle connection first (PoolFIFO), and its
// idle connections last wrote before the replica stopped acknowledging: an
// acquisition must still be refused, where a WAIT on the next idle
// connection answered at once for a fence no replica had (the mark write
// beside WAIT is what makes it cover the script's write).
func TestAnswerWaitsForItsWriteWhicheverConnectionWAITRunsOn(t *testing.T) {
	_, replica, open := replicated(t, 300*time.Millisecond)
	b := open(redis.WithRedisOptions(func(o *goredis.Options) { o.PoolFIFO = true }))
	const n = 4
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n { // several connections, each having written while the replica acknowledged
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = acquireUntilAcknowledged(t, b, i) }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("acquire %d with the replica up: %v", i, err)
		}
	}
	replica.Freeze()
	defer replica.Thaw()
	for i := n; i < 2*n; i++ {
		if _, err := acquireN(b, i); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
			t.Fatalf("acquire %d while the replica acknowledges nothing: %v, want BACKEND_UNAVAILABLE", i, err)
		}
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
