package postgres_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/postgres"
	"github.com/fencegate/fencegate/fencestore/storetest"
	"github.com/fencegate/fencegate/internal/testenv"
)

func open(t testing.TB, dsn string) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) fencegate.FenceStore {
		return open(t, testenv.PostgresURL(t))
	})
}

// TestRestartKeepsState opens the same schema again, as a restarted gateway
// would: the state is still there and the migrations are not applied twice.
func TestRestartKeepsState(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgresURL(t)
	s := open(t, dsn)
	g := fencegate.VerifiedGrant{Grant: fencegate.Grant{
		Resource: "res/a", Owner: "o", Lease: "l", FenceToken: 1<<63 + 1, OperationID: "op", OperationRoot: "r", IssuedAt: 1,
	}, Digest: "sha256:g"}
	now := time.UnixMilli(1_700_000_000_000).UTC()
	adm, err := s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: 1, Target: "res/a", Method: "PUT",
		PayloadDigest: "sha256:p", ReceiptID: "r1", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1", Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: 2, Target: "res/a", Method: "PUT",
		PayloadDigest: "sha256:q", ReceiptID: "r2", Now: now}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()

	s = open(t, dsn)
	defer s.Close()
	row, err := s.Resource(ctx, "res/a")
	if err != nil || row.HighestFence != 1<<63+1 || row.LastSegmentSeq != 2 || row.PendingReceipt != "r2" {
		t.Fatalf("after restart: %+v, %v", row, err)
	}
	if v, _ := s.Version(ctx, "res/a"); v != "v1" {
		t.Fatalf("version after restart: %q", v)
	}
	if _, err := s.Settle(ctx, "r2", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v2", Now: now}); err != nil {
		t.Fatal(err)
	}
	wantMigrations(t, dsn)
}

// TestConcurrentOpenMigratesOnce starts several replicas on a fresh schema at
// once: the advisory lock lets one migrate and the others find it done.
func TestConcurrentOpenMigratesOnce(t *testing.T) {
	dsn := testenv.PostgresURL(t)
	const replicas = 4
	var wg sync.WaitGroup
	errs := make(chan error, replicas)
	for range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(context.Background(), dsn)
			if err != nil {
				errs <- err
				return
			}
			_ = s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Open: %v", err)
	}
	wantMigrations(t, dsn)
}

// wantMigrations checks that every migration was recorded exactly once.
func wantMigrations(t *testing.T, dsn string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var applied, distinct int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT version_id) FROM `+postgres.MigrationsTable+
		` WHERE version_id > 0 AND is_applied`).Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	files, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	if applied != len(files) || distinct != len(files) {
		t.Fatalf("migrations recorded: %d rows, %d versions; want each of the %d applied once", applied, distinct, len(files))
	}
}

func TestOpenRefusesMissingSchema(t *testing.T) {
	s, err := postgres.Open(context.Background(), testenv.WithParam(t, testenv.PostgresURL(t), "search_path", "no_such_schema"))
	if err == nil {
		_ = s.Close()
		t.Fatal("Open with a search_path naming no schema succeeded")
	}
	if code := fencegate.ErrorCode(err); code != fencegate.CodeInvalidRequest {
		t.Fatalf("Open with a search_path naming no schema: %v, want INVALID_REQUEST", err)
	}
}

func BenchmarkAdmitSettle(b *testing.B) {
	s := open(b, testenv.PostgresURL(b))
	defer s.Close()
	storetest.BenchAdmitSettle(b, s)
}

func BenchmarkAdmitSettleKeptRequest(b *testing.B) {
	s := open(b, testenv.PostgresURL(b))
	defer s.Close()
	storetest.BenchAdmitSettleKeptRequest(b, s)
}
