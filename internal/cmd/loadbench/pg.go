package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/fencestore/postgres"
)

// pgStats reads the server's commit and WAL counters. xact_commit is the
// bench database's own (pg_stat_database); the WAL counters (pg_stat_wal) are
// the whole server's, so other clients of the server add to them. Backends
// report their counters when their session ends at the latest, which is why
// every measured point ends its clients before reading.
type pgStats struct {
	url string // the bench database
	db  string
}

type pgCounters struct{ commits, walSyncs, walRecords, walBytes int64 }

type pgDelta struct {
	valid                                   bool
	commits, walSyncs, walRecords, walBytes int64
}

func (a pgCounters) minus(b pgCounters) pgDelta {
	return pgDelta{valid: true, commits: a.commits - b.commits, walSyncs: a.walSyncs - b.walSyncs,
		walRecords: a.walRecords - b.walRecords, walBytes: a.walBytes - b.walBytes}
}

func (p *pgStats) read(ctx context.Context) pgCounters {
	var c pgCounters
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		return c
	}
	defer conn.Close(ctx)
	_ = conn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, p.db).Scan(&c.commits)
	_ = conn.QueryRow(ctx, `SELECT wal_sync, wal_records, wal_bytes::bigint FROM pg_stat_wal`).Scan(&c.walSyncs, &c.walRecords, &c.walBytes)
	return c
}

// settle waits until the counters stop moving (ended sessions have reported).
func (p *pgStats) settle(ctx context.Context) pgCounters {
	prev := p.read(ctx)
	for range 20 {
		time.Sleep(150 * time.Millisecond)
		cur := p.read(ctx)
		// Our own reading session commits once; allow for it.
		if cur.commits-prev.commits <= 2 && cur.walSyncs == prev.walSyncs {
			return cur
		}
		prev = cur
	}
	return prev
}

// benchDB makes sure the bench database exists (created on the server of
// base if missing) and returns its URL and name.
func benchDB(ctx context.Context, base, name string) (string, error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
		return "", err
	}
	if n == 0 {
		if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
			return "", err
		}
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// schemaURL creates schema in the database of dbURL and returns a URL whose
// search_path is it.
func schemaURL(ctx context.Context, dbURL, schema string) (string, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
		return "", err
	}
	u, _ := url.Parse(dbURL)
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func dropSchema(ctx context.Context, dbURL, schema string) {
	if conn, err := pgx.Connect(ctx, dbURL); err == nil {
		_, _ = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		_ = conn.Close(ctx)
	}
}

// pgbenchScript is one transaction as the gateway's admission writes it at
// its least: upsert the resource's fence row, insert the receipt.
const pgbenchScript = `\set seg random(1, 1000000000000)
BEGIN;
INSERT INTO fence_resources (resource, highest_fence, last_segment_seq) VALUES ('pgb/' || :client_id, 1, :seg)
  ON CONFLICT (resource) DO UPDATE SET last_segment_seq = EXCLUDED.last_segment_seq, updated_at = now();
INSERT INTO fence_receipts (receipt_id, resource, target, method, fence_token, segment, operation_id, operation_root,
  lease, owner, grant_digest, payload_digest, state, created_at)
  VALUES ('pgb-' || :client_id || '-' || :seg, 'pgb/' || :client_id, 'pgb/' || :client_id, 'PUT', 1, :seg, 'op', 'root',
  'lease', 'owner', 'sha256-g', 'sha256-p', 'PENDING', now());
COMMIT;
`

var tpsRE = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgbench runs the script with c clients for d against the fence store's
// tables in a schema of its own, and returns the rate and latencies
// (from pgbench's per-transaction log).
func runPgbench(ctx context.Context, stats *pgStats, dir string, c int, d time.Duration, tag string) (sample, error) {
	schema := "pgb_" + tag
	su, err := schemaURL(ctx, stats.url, schema)
	if err != nil {
		return sample{}, err
	}
	defer dropSchema(ctx, stats.url, schema)
	cc, err := pgx.ParseConfig(su)
	if err != nil {
		return sample{}, err
	}
	if err := postgres.Migrate(ctx, cc); err != nil {
		return sample{}, err
	}
	script := filepath.Join(dir, "pgbench.sql")
	if err := os.WriteFile(script, []byte(pgbenchScript), 0o600); err != nil {
		return sample{}, err
	}
	logDir := filepath.Join(dir, "pgblog-"+tag)
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return sample{}, err
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	before := stats.settle(ctx)
	cmd := exec.CommandContext(ctx, "pgbench", "-n", "-M", "prepared", "-f", script, "-c", strconv.Itoa(c),
		"-j", strconv.Itoa(min(c, 4)), "-T", strconv.Itoa(secs), "-l", "--log-prefix", filepath.Join(logDir, "pgb"), stats.url)
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+schema)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return sample{}, fmt.Errorf("pgbench: %v\n%s", err, out)
	}
	after := stats.settle(ctx)
	m := tpsRE.FindSubmatch(out)
	if m == nil {
		return sample{}, fmt.Errorf("pgbench: no tps in\n%s", out)
	}
	tps, _ := strconv.ParseFloat(string(m[1]), 64)
	s := sample{window: time.Duration(secs) * time.Second, syncs: -1}
	s.writes = int(tps * float64(secs))
	s.lat = pgbenchLatencies(logDir)
	s.pg = after.minus(before)
	return s, nil
}

// pgbenchLatencies reads the third field (latency, µs) of every line of the
// per-transaction logs in dir.
func pgbenchLatencies(dir string) []time.Duration {
	files, _ := filepath.Glob(filepath.Join(dir, "pgb*"))
	var out []time.Duration
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			fs := strings.Fields(line)
			if len(fs) < 3 {
				continue
			}
			if us, err := strconv.ParseInt(fs[2], 10, 64); err == nil {
				out = append(out, time.Duration(us)*time.Microsecond)
			}
		}
	}
	return out
}
