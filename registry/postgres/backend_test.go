package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/registry/leasetest"
	"github.com/fencegate/fencegate/registry/postgres"
)

func open(t testing.TB, url string) *postgres.Backend {
	t.Helper()
	b, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return b
}

func TestContract(t *testing.T) {
	leasetest.Run(t, func(t *testing.T) fencegate.LeaseBackend {
		return open(t, testenv.PostgresURL(t))
	})
}

func TestMigrationsApplyOnceAcrossOpens(t *testing.T) {
	url := testenv.PostgresURL(t)
	first := open(t, url)
	defer first.Close()
	second := open(t, url) // must not fail re-creating tables
	defer second.Close()
	if err := second.SetFloor(context.Background(), 7, fencegate.Guard{}); err != nil {
		t.Fatalf("set floor: %v", err)
	}
}

func TestUint64FencesAboveInt64Range(t *testing.T) {
	b := open(t, testenv.PostgresURL(t))
	defer b.Close()
	ctx := context.Background()
	const floor = uint64(1) << 63
	if err := b.SetFloor(ctx, floor, fencegate.Guard{}); err != nil {
		t.Fatalf("set floor: %v", err)
	}
	l, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "r1", TTL: 1e9, Now: leasetest.T0})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if l.FenceToken != floor+1 {
		t.Fatalf("want fence %d, got %d", floor+1, l.FenceToken)
	}
}

func TestNulByteInOwnerIsInvalidRequest(t *testing.T) {
	b := open(t, testenv.PostgresURL(t))
	defer b.Close()
	_, err := b.Acquire(context.Background(), fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "al\x00ice",
		RequestID: "r1", TTL: 1e9, Now: leasetest.T0})
	if fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
		t.Fatalf("want INVALID_REQUEST, got %v", err)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	be := open(b, testenv.PostgresURL(b))
	defer be.Close()
	leasetest.BenchmarkAcquireRelease(b, be)
}

// A server that refuses writes (a hot standby, a primary set read-only
// during a failover) answers SQLSTATE 25006: the acquire is
// BACKEND_UNAVAILABLE, worth retrying once a writable primary answers, not
// INTERNAL; nothing was written.
func TestReadOnlyServerIsUnavailable(t *testing.T) {
	url := testenv.PostgresURL(t)
	open(t, url).Close() // migrated
	ro := open(t, url+"&default_transaction_read_only=on")
	defer ro.Close()
	_, err := ro.Acquire(context.Background(), fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "r1", OperationID: "op", TTL: time.Second, Now: time.Now()})
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("acquire on a read-only server: %v, want BACKEND_UNAVAILABLE", err)
	}
}

// Rule: a Prune with nothing past retention (most of a registry's ticks)
// writes nothing: it runs no write transaction, so it answers on a server
// that refuses writes, guard included (a failing guard is still
// COORDINATION_STATE_LOST); a Prune with a record due still deletes it in a
// write transaction (BACKEND_UNAVAILABLE there).
func TestPruneWithNothingDueWritesNothing(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	rw := open(t, url)
	defer rw.Close()
	inc, err := rw.Claim(ctx, "", "inc-1", 0)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	const ttl = time.Second
	l, err := rw.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice",
		RequestID: "r1", TTL: ttl, Now: leasetest.T0})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, _, err := rw.Release(ctx, l.ID, l.Owner, leasetest.T0, fencegate.Guard{}); err != nil {
		t.Fatalf("release: %v", err)
	}
	ro := open(t, testenv.WithParam(t, url, "default_transaction_read_only", "on"))
	defer ro.Close()
	g := fencegate.Guard{Incarnation: inc.ID, MinRevision: inc.Revision}
	cutoff := leasetest.T0.Add(ttl + leasetest.Retention)

	if n, err := ro.Prune(ctx, cutoff.Add(-time.Millisecond), g); err != nil || n != 0 {
		t.Fatalf("prune with nothing due on a read-only server: %d, %v; want 0 and no write", n, err)
	}
	if _, err := ro.Prune(ctx, cutoff.Add(-time.Millisecond), fencegate.Guard{Incarnation: "inc-0"}); fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		t.Fatalf("prune with nothing due under another marker: %v, want COORDINATION_STATE_LOST", err)
	}
	if _, err := ro.Prune(ctx, cutoff, g); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("prune with a record due on a read-only server: %v, want BACKEND_UNAVAILABLE (it must write)", err)
	}
	if n, err := rw.Prune(ctx, cutoff, g); err != nil || n != 1 {
		t.Fatalf("prune with a record due: %d, %v; want 1 deleted", n, err)
	}
	if n, err := ro.Prune(ctx, cutoff, g); err != nil || n != 0 {
		t.Fatalf("prune after the due record went, on a read-only server: %d, %v; want 0 and no write", n, err)
	}

	// Without a guard the meta row is not read (as checkGuard does not):
	// its absence is no error.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DELETE FROM registry_meta`); err != nil {
		t.Fatalf("delete the meta row: %v", err)
	}
	if n, err := ro.Prune(ctx, cutoff, fencegate.Guard{}); err != nil || n != 0 {
		t.Fatalf("unguarded prune without a meta row: %d, %v; want 0", n, err)
	}
}
