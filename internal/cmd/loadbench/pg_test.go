package main

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestPgCPUProbeCountsTheBenchDatabaseOnly, on a server of its own: work
// done by a session of the bench database shows in pgcpu (backends) and in
// pgsrv (server); the same work in another database shows in pgsrv alone,
// and the probe's own queries are in neither's backends.
func TestPgCPUProbeCountsTheBenchDatabaseOnly(t *testing.T) {
	ctx := context.Background()
	pg := testenv.OwnPostgres(t)
	dbURL, err := benchDB(ctx, pg.URL(), "bench")
	if err != nil {
		t.Fatal(err)
	}
	probe := (&pgStats{url: dbURL, db: "bench"}).cpuProbe(ctx)
	if probe == nil {
		t.Fatal("no probe on a server of this machine")
	}
	defer probe.close(ctx)
	// burn's session stays open until the test ends or it is closed: a
	// session alive at a reading is counted to it.
	burn := func(u string) *pgx.Conn {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(ctx) })
		var n int64
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM generate_series(1, 3000000)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	a := probe.read(ctx)
	mine := burn(dbURL)
	b := probe.read(ctx)
	if d := b.minus(a); d.backends <= 0 || d.server <= 0 {
		t.Fatalf("work in the bench database: backends %s server %s", d.backends, d.server)
	}
	_ = mine.Close(ctx) // ended before the next reading: it adds nothing more
	other, _ := url.Parse(pg.URL())
	other.Path = "/postgres"
	burn(other.String())
	c := probe.read(ctx)
	for range 3 { // the probe's own queries
		c = probe.read(ctx)
	}
	if d := c.minus(b); d.backends != 0 || d.server <= 0 {
		t.Fatalf("work in another database: backends %s (want 0) server %s", d.backends, d.server)
	}
}

// TestPgCPUDeltaCountsSessionsThatStartedInTheWindowWhole: a session alive
// at both readings adds its difference, one that appeared in between adds
// all of its time, one that ended in between adds nothing.
func TestPgCPUDeltaCountsSessionsThatStartedInTheWindowWhole(t *testing.T) {
	a := pgCPU{backends: map[int]time.Duration{1: 10, 2: 5}, server: 100, wal: 1000}
	b := pgCPU{backends: map[int]time.Duration{1: 30, 3: 7}, server: 160, wal: 1600}
	d := b.minus(a)
	if !d.valid || d.backends != 27 || d.server != 60 || d.wal != 600 {
		t.Fatalf("delta %+v", d)
	}
}

// TestWithParamKeepsTheOtherParameters: -pg-pool adds pool_max_conns to the
// gateway's fence-store URL without losing its search_path or sslmode.
func TestWithParamKeepsTheOtherParameters(t *testing.T) {
	got, err := withParam("postgres://u@127.0.0.1:5432/db?sslmode=disable&search_path=gw_x", "pool_max_conns", "3")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if q.Get("sslmode") != "disable" || q.Get("search_path") != "gw_x" || q.Get("pool_max_conns") != "3" || u.Path != "/db" {
		t.Errorf("withParam = %s", got)
	}
	if _, err := withParam("postgres://u@[::1/db", "pool_max_conns", "3"); err == nil {
		t.Error("withParam took a URL that does not parse")
	}
}
