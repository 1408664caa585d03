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
	return withParam(dbURL, "search_path", schema)
}

// withParam is dbURL with its query parameter key set to v (the others
// kept), or an error if dbURL is not a URL.
func withParam(dbURL, key, v string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("Postgres URL: %w", err)
	}
	q := u.Query()
	q.Set(key, v)
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
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return sample{}, fmt.Errorf("pgbench: %v", err)
	}
	cpu := pgbenchCPU(ctx, stats, c, start.Add(time.Duration(secs)*time.Second))
	if err := cmd.Wait(); err != nil {
		return sample{}, fmt.Errorf("pgbench: %v\n%s", err, out.String())
	}
	after := stats.settle(ctx)
	m := tpsRE.FindStringSubmatch(out.String())
	if m == nil {
		return sample{}, fmt.Errorf("pgbench: no tps in\n%s", out.String())
	}
	tps, _ := strconv.ParseFloat(m[1], 64)
	s := sample{window: time.Duration(secs) * time.Second, syncs: -1}
	s.writes = int(tps * float64(secs))
	var ends []time.Time
	s.lat, ends = pgbenchLog(logDir)
	s.pg = after.minus(before)
	if cpu.valid {
		for _, e := range ends {
			if e.After(cpu.from) && !e.After(cpu.to) {
				cpu.writes++
			}
		}
		s.pgcpu = cpu
	}
	return s, nil
}

// pgbenchCPU measures the server's CPU over a window inside a pgbench run
// that ends at end: from when its c sessions are all connected to a little
// before it ends (its backends exit with it, taking their counters along).
// The caller counts the transactions that completed inside [from, to].
func pgbenchCPU(ctx context.Context, stats *pgStats, c int, end time.Time) pgCPUDelta {
	probe := stats.cpuProbe(ctx)
	if probe == nil {
		return pgCPUDelta{}
	}
	defer probe.close(ctx)
	for time.Now().Before(end) && probe.sessions(ctx, "pgbench") < c {
		time.Sleep(20 * time.Millisecond)
	}
	a := probe.read(ctx)
	margin := min(300*time.Millisecond, time.Until(end)/4)
	time.Sleep(time.Until(end.Add(-margin)))
	b := probe.read(ctx)
	return b.minus(a)
}

// pgbenchLog reads pgbench's per-transaction logs in dir: the third field
// of each line (latency, µs) and its completion time (fields five and six,
// epoch seconds and µs).
func pgbenchLog(dir string) (lat []time.Duration, ends []time.Time) {
	files, _ := filepath.Glob(filepath.Join(dir, "pgb*"))
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
				lat = append(lat, time.Duration(us)*time.Microsecond)
			}
			if len(fs) >= 6 {
				sec, err1 := strconv.ParseInt(fs[4], 10, 64)
				us, err2 := strconv.ParseInt(fs[5], 10, 64)
				if err1 == nil && err2 == nil {
					ends = append(ends, time.Unix(sec, us*1000))
				}
			}
		}
	}
	return lat, ends
}

// pgCPUProbe reads the CPU time of a Postgres server running on this
// machine, from /proc (it is nil when the server is not local or /proc
// cannot be read), and the server's WAL position:
//
//   - backends: the user+system time (/proc/PID/schedstat, ns) of the bench
//     database's sessions other than the probe's own (pg_stat_activity,
//     every backend type with that datname), summed over the sessions alive
//     at both readings or at the second (a session that started between
//     counts whole, one that ended between is lost: the measured points
//     keep their sessions open across the window). This is the number to
//     compare, pgcpu/w: other clients of a shared server do not add to it.
//   - server: every process of the server, the postmaster's own time plus
//     its cutime/cstime (the exited, reaped backends) plus each live
//     child's time (/proc/PID/stat, 10 ms ticks): background processes
//     (WAL writer, checkpointer, autovacuum), the probe's own sessions and
//     every other client of the server are in it. pgsrv/w.
//   - wal: pg_current_wal_lsn(), so the difference is the WAL the whole
//     server wrote (other databases' too).
type pgCPUProbe struct {
	conn       *pgx.Conn
	db         string
	postmaster int
	self       int
}

// pgCPU is one reading of a probe.
type pgCPU struct {
	at       time.Time
	backends map[int]time.Duration
	server   time.Duration
	wal      int64
}

// pgCPUDelta is what the server spent between two readings; writes is the
// number of writes (transactions, for pgbench) inside [from, to].
type pgCPUDelta struct {
	valid            bool
	from, to         time.Time
	backends, server time.Duration
	wal              int64
	writes           int
}

func (b pgCPU) minus(a pgCPU) pgCPUDelta {
	d := pgCPUDelta{valid: true, from: a.at, to: b.at, server: b.server - a.server, wal: b.wal - a.wal}
	for pid, t := range b.backends {
		d.backends += t - a.backends[pid]
	}
	return d
}

// cpuProbe opens a probe on the bench database; nil when the server's
// processes are not this machine's.
func (p *pgStats) cpuProbe(ctx context.Context) *pgCPUProbe {
	conn, err := pgx.Connect(ctx, p.url)
	if err != nil {
		return nil
	}
	pr := &pgCPUProbe{conn: conn, db: p.db}
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pr.self); err != nil || !isPostgres(pr.self) {
		_ = conn.Close(ctx)
		return nil
	}
	pr.postmaster = parentOf(pr.self)
	if !isPostgres(pr.postmaster) {
		_ = conn.Close(ctx)
		return nil
	}
	return pr
}

func (pr *pgCPUProbe) close(ctx context.Context) { _ = pr.conn.Close(ctx) }

// sessions is how many sessions of the bench database have application_name app.
func (pr *pgCPUProbe) sessions(ctx context.Context, app string) int {
	var n int
	_ = pr.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`, pr.db, app).Scan(&n)
	return n
}

func (pr *pgCPUProbe) read(ctx context.Context) pgCPU {
	r := pgCPU{backends: map[int]time.Duration{}}
	_ = pr.conn.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0')::bigint`).Scan(&r.wal)
	rows, err := pr.conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, pr.db)
	if err == nil {
		for rows.Next() {
			var pid int
			if rows.Scan(&pid) == nil {
				r.backends[pid] = schedTime(pid)
			}
		}
		rows.Close()
	}
	own, dead := statTimes(pr.postmaster)
	r.server = own + dead
	for _, c := range childrenOf(pr.postmaster) {
		own, dead := statTimes(c)
		r.server += own + dead
	}
	r.at = time.Now()
	return r
}
