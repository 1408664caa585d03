package postgres

import (
	"context"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/pgmigrate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestQuarantineMigrationMergesRepeatsAndNamesRecordsAsTheCodeDoes: rows
// written before migration 00006 (one per attempt, no ID) become one record
// per distinct payload with attempts counted, and each gets the ID
// fencegate.QuarantineID gives it, so the code finds it by that ID.
func TestQuarantineMigrationMergesRepeatsAndNamesRecordsAsTheCodeDoes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.PostgresURL(t)
	conn := migrateBefore(ctx, t, url, "00006_quarantine_records.sql")
	_, err := conn.Exec(ctx, `
		INSERT INTO fence_resources (resource) VALUES ('res/a');
		INSERT INTO fence_receipts (receipt_id, resource, target, method, fence_token, segment, operation_id, operation_root,
			lease, owner, grant_digest, payload_digest, state, created_at)
			VALUES ('r1', 'res/a', 'res/a', 'PUT', 3, 1, 'op', 'root', 'l', 'o', 'sha256:g', 'sha256:a', 'COMMITTED', now());
		INSERT INTO fence_quarantine (resource, fence_token, segment, receipt_id, payload_digest, owner, at) VALUES
			('res/a', 3, 1, 'r1', 'sha256:x', 'o', '2026-01-01T00:00:01Z'),
			('res/a', 3, 1, 'r1', 'sha256:x', 'o', '2026-01-01T00:00:02Z'),
			('res/a', 3, 1, 'r1', 'sha256:y', 'o', '2026-01-01T00:00:03Z');`)
	_ = conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}

	s, err := Open(ctx, url) // applies 00006
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := s.Quarantined(ctx, "res/a", fencegate.Page{})
	if err != nil || len(p.Records) != 2 {
		t.Fatalf("Quarantined after the migration = %+v, %v; want two records", p.Records, err)
	}
	x := p.Records[0]
	if x.PayloadDigest != "sha256:x" || x.Attempts != 2 || !x.LastAt.After(x.At) || p.Records[1].Attempts != 1 || x.PayloadKept {
		t.Fatalf("merged records = %+v", p.Records)
	}
	want := fencegate.QuarantineID("res/a", 3, 1, "", "", "", "sha256:x")
	if x.ID != want {
		t.Fatalf("migrated ID %q, fencegate.QuarantineID says %q", x.ID, want)
	}
	if got, err := s.QuarantineRecord(ctx, want); err != nil || got.Attempts != 2 {
		t.Fatalf("QuarantineRecord(%s) = %+v, %v", want, got, err)
	}
}

// migrateBefore brings the test database at url to the version before the
// migration file first (every migration whose name sorts below it applied,
// as a store of that version left it) and returns a connection to it, for
// writing rows as the code of that version did; the caller closes it.
func migrateBefore(ctx context.Context, t *testing.T, url, first string) *pgx.Conn {
	t.Helper()
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(migrations, "migrations/"+first); err != nil {
		t.Fatal(err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	old := fstest.MapFS{}
	for _, path := range names {
		name := path[len("migrations/"):]
		if name >= first {
			continue
		}
		b, err := fs.ReadFile(migrations, path)
		if err != nil {
			t.Fatal(err)
		}
		old[name] = &fstest.MapFile{Data: b}
	}
	if err := pgmigrate.Up(ctx, cc, old, MigrationsTable, "fencegate/fencestore/postgres"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}
