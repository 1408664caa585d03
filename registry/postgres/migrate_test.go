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

// legacySchema is what the hand-rolled migrator (before goose) left in a
// database: its tables, created without IF NOT EXISTS, and its own version table.
const legacySchema = `
CREATE TABLE registry_schema_migrations (version bigint PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE registry_meta (
    id       boolean PRIMARY KEY DEFAULT true CHECK (id),
    revision NUMERIC(20,0) NOT NULL DEFAULT 0 CHECK (revision BETWEEN 0 AND 18446744073709551615),
    floor    NUMERIC(20,0) NOT NULL DEFAULT 0 CHECK (floor BETWEEN 0 AND 18446744073709551615)
);
INSERT INTO registry_meta (id) VALUES (true);
CREATE TABLE registry_resources (
    resource      text PRIMARY KEY,
    last_fence    NUMERIC(20,0) NOT NULL DEFAULT 0 CHECK (last_fence BETWEEN 0 AND 18446744073709551615),
    current_lease text
);
CREATE TABLE registry_leases (
    id                 text PRIMARY KEY,
    resource           text NOT NULL REFERENCES registry_resources (resource),
    owner              text NOT NULL,
    request_id         text NOT NULL,
    fence              NUMERIC(20,0) NOT NULL CHECK (fence BETWEEN 1 AND 18446744073709551615),
    revision           NUMERIC(20,0) NOT NULL CHECK (revision BETWEEN 1 AND 18446744073709551615),
    operation_id       text NOT NULL,
    operation_root     text NOT NULL,
    operation_category text NOT NULL,
    state              text NOT NULL CHECK (state IN ('HELD', 'RELEASED', 'EXPIRED')),
    ttl_ns             bigint NOT NULL CHECK (ttl_ns > 0),
    acquired_at        timestamptz NOT NULL,
    expires_at         timestamptz NOT NULL,
    UNIQUE (owner, request_id)
);
INSERT INTO registry_schema_migrations (version) VALUES (1);
UPDATE registry_meta SET floor = 40, revision = 3;
INSERT INTO registry_resources (resource, last_fence, current_lease) VALUES ('db/old', 41, 'l-old');
INSERT INTO registry_leases VALUES ('l-old', 'db/old', 'alice', 'r-old', 41, 3, 'op', 'root', '', 'HELD',
    3600000000000, now(), now() + interval '1 hour');
`

func TestDatabaseFromTheHandRolledMigratorIsTakenOverByGooseKeepingItsState(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, legacySchema); err != nil {
		t.Fatalf("legacy schema: %v", err)
	}
	b := open(t, url)
	defer b.Close()
	l, err := b.Lease(ctx, "l-old", time.Now())
	if err != nil || l.FenceToken != 41 || l.State != fencegate.StateHeld {
		t.Fatalf("legacy lease after the take-over: %+v %v", l, err)
	}
	n, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l-new", Resource: "db/new", Owner: "bob",
		RequestID: "r-new", TTL: time.Second, Now: leasetest.T0})
	if err != nil || n.FenceToken <= 40 {
		t.Fatalf("the legacy floor 40 was lost: %+v %v", n, err)
	}
	var version int64
	if err := conn.QueryRow(ctx, "SELECT max(version_id) FROM "+postgres.MigrationsTable).Scan(&version); err != nil || version != 4 {
		t.Fatalf("goose version table: %d %v", version, err)
	}
	_ = conn.Close(ctx)
}
