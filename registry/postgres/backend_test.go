package postgres_test

import (
	"context"
	"testing"
	"time"

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
