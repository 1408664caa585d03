// Command loadbench measures fenced writes through the built gateway on each
// fence/object store and, in the same run, the baseline each path is held
// against:
//
//   - postgres: `gateway serve --config F --fence-store postgres://...` (F:
//     an in-process registry, access rules, the local object store; see
//     serveConfig) against pgbench running one transaction of a fence-row
//     upsert plus a receipt insert on the store's own tables;
//   - embedded: `gateway dev` (bbolt fence store, local object store), against
//     a bare bbolt commit plus the same object-file write, without HTTP;
//   - s3: `gateway dev --store s3b=s3://...` (versitygw), against the same PUTs
//     sent straight to the server with aws-sdk-go-v2.
//
// Workers write 1 KiB bodies to distinct resources, each its segments 1, 2,
// 3 ... under one grant, through the project's client. For each concurrency
// it prints writes/s, p50/p99 and the ratio to the baseline, the gateway's
// CPU per write, its fsync-family calls per write (counted with strace when
// -fsyncs), and for Postgres the commits and WAL syncs per write and, for
// a server on this machine, its CPU per write (pgcpu/w: the bench
// database's sessions; pgsrv/w: every server process) and WAL bytes per
// write, for the gateway and for pgbench (pg.go's pgCPUProbe); under it
// the mean admission, effect and remaining time per write from the
// gateway's own histograms (its operator listener, scraped before and after
// the window) and the load generator's own CPU per write (getrusage). At
// the points of -check it also drives the same writes without the project's
// client (wrk and plain net/http, check.go) on the same gateway, and the
// floor (floor.go): the same PUTs to a bare HTTP server writing each body
// with the path's object store and no fencing, its rate and CPU per write
// what the gateway's are held against. -profile DIR
// saves a CPU profile, an allocation profile and an execution trace of the
// gateway per point (profile.go). -prefill N fills each Postgres and
// embedded point's fence store with N settled receipts first (prefill.go,
// prefillembedded.go); with -pair each such run also measures the point on
// an empty store, alternating which goes first, and prints filled ÷ empty
// per run (pair.go); -against BIN measures every run also with a second
// gateway binary, alternating, and prints this ÷ that per run (pair.go).
// -pg-latency D puts every Postgres client of the run behind a proxy that
// delays data D each way (latency.go). Every point starts a fresh gateway
// on a fresh store; -runs N keeps the median run. scripts/bench.sh wraps
// it. It asserts nothing: it reports.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

type options struct {
	paths   []string
	conc    []int
	d       time.Duration
	runs    int
	bin     string
	pgBase  string
	pgDB    string
	s3      s3Target
	fsyncs  bool
	prefill int
	out     io.Writer
	filled  string // the pre-filled Postgres store's URL, if any
	// filledEmbedded is the pre-filled embedded store's file, copied into
	// each embedded point's data directory ("" for none).
	filledEmbedded string
	// profile is the directory for per-point profiles ("" for none).
	profile string
	// checks are the points ("embedded:8") where the cross-checks run,
	// with checkWith: "wrk" and/or "http" on the gateway, "floor" beside it.
	checks    map[string]bool
	checkWith []string
	// pgDev runs the Postgres path as `gateway dev --fence-store` instead of
	// `gateway serve`, to compare the two.
	pgDev bool
	// pgPool is the pool_max_conns put in the gateway's fence-store URL
	// (0: none, the store's default; else at least 3), which sets how many
	// write batches it runs at once (pgPool-2).
	pgPool int
	// pgLatency, when positive, is the delay each way the run's Postgres
	// clients see (latency.go).
	pgLatency time.Duration
	// deferSettle is the gateway's deferSettle ("" for its default).
	deferSettle string
	// pair measures each Postgres and embedded run with -prefill twice,
	// filled and empty (pair.go).
	pair bool
	// against is a second gateway binary each run also measures, in
	// alternating order (pair.go); "" for none.
	against string
	// noBaseline skips the baseline (the other side of a pair).
	noBaseline bool
}

func main() {
	floorMain() // a floor server process serves and exits here (floor.go)
	o := options{out: os.Stdout}
	paths := flag.String("paths", "postgres,embedded,s3", "paths to measure: postgres, embedded, s3")
	conc := flag.String("c", "1,8,32", "concurrencies")
	flag.DurationVar(&o.d, "d", 3*time.Second, "measured window per point")
	flag.IntVar(&o.runs, "runs", 1, "runs per point; the median (by writes/s) is printed")
	flag.StringVar(&o.bin, "gateway-bin", "", "gateway binary (default: go build ./cmd/gateway)")
	flag.StringVar(&o.pgBase, "pg", envOr("FENCEGATE_TEST_PG", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "Postgres server URL")
	flag.StringVar(&o.pgDB, "pg-db", "fencegate_bench", "database the bench creates (if missing) and uses")
	flag.StringVar(&o.s3.endpoint, "s3-endpoint", envOr("FENCEGATE_TEST_S3_ENDPOINT", "http://127.0.0.1:7070"), "S3-compatible server")
	flag.StringVar(&o.s3.bucket, "s3-bucket", envOr("FENCEGATE_TEST_S3_BUCKET", "fencegate-test"), "bucket")
	flag.StringVar(&o.s3.accessKey, "s3-access-key", envOr("FENCEGATE_TEST_S3_ACCESS_KEY", "fencegate-ak"), "access key")
	flag.StringVar(&o.s3.secretKey, "s3-secret-key", envOr("FENCEGATE_TEST_S3_SECRET_KEY", "fencegate-sk"), "secret key")
	flag.BoolVar(&o.fsyncs, "fsyncs", true, "run the gateway under strace to count its fsync-family calls")
	flag.IntVar(&o.prefill, "prefill", 0, "settled receipts over N/10 resources in the fence store of each postgres and embedded point first: bulk-inserted (SQL) into the Postgres store; written once through the embedded store's Admit and Settle and copied for each embedded point (the s3 path starts empty)")
	flag.StringVar(&o.profile, "profile", "", "save a CPU profile, an allocation profile and an execution trace of the gateway per point (first run) as DIR/PATH-cN.cpu, .allocs, .trace")
	checks := flag.String("check", "embedded:8", "points PATH:C where the same writes are also driven without the project's client (\"\" for none)")
	checkWith := flag.String("check-with", "wrk,http,floor", "cross-check generators: wrk (Debian's wrk; skipped if absent) and/or http (plain net/http) on the gateway, and floor: plain net/http to a bare HTTP server writing each body with the path's object store, no fencing (floor.go)")
	flag.StringVar(&o.deferSettle, "defer-settle", "", "the gateway's deferSettle window (e.g. 0 or 2ms; \"\" for its default)")
	flag.IntVar(&o.pgPool, "pg-pool", 0, "pool_max_conns in the gateway's fence-store URL (at least 3: that minus 2 write batches run at once); 0 for the store's default")
	flag.DurationVar(&o.pgLatency, "pg-latency", 0, "put a proxy in front of the Postgres server that delays data this long each way (e.g. 1ms), for the gateway, pgbench and loadbench alike: the server as if a network away (latency.go)")
	flag.BoolVar(&o.pair, "pair", false, "with -prefill: each postgres and embedded run also measures the point on an empty store, the two in alternating order, and prints each run's filled ÷ empty ratios (writes/s, gateway CPU and request time per write, Postgres CPU per write)")
	flag.StringVar(&o.against, "against", "", "a second gateway binary: every run also measures the point with it, the two in alternating order, and prints each run's this ÷ that ratios (writes/s, gateway CPU, request time, Postgres CPU per write) with their medians (pair.go); with -prefill both use the one filled store this loadbench built")
	flag.BoolVar(&o.pgDev, "pg-dev", false, "run the Postgres path as gateway dev --fence-store instead of gateway serve (to compare)")
	flag.Parse()
	o.checks = map[string]bool{}
	for _, c := range strings.Split(*checks, ",") {
		if c = strings.TrimSpace(c); c != "" {
			o.checks[c] = true
		}
	}
	for _, c := range strings.Split(*checkWith, ",") {
		if c = strings.TrimSpace(c); c != "" {
			o.checkWith = append(o.checkWith, c)
		}
	}
	o.s3.region = "us-east-1"
	o.paths = strings.Split(*paths, ",")
	var bad []string
	for _, s := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			bad = append(bad, fmt.Sprintf("bad -c %q", s))
			continue
		}
		o.conc = append(o.conc, n)
	}
	if bad = append(bad, o.problems()...); len(bad) > 0 {
		for _, p := range bad {
			fmt.Fprintln(os.Stderr, "loadbench:", p)
		}
		os.Exit(2)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

// problems are what is wrong with o's settings, every one of them.
func (o options) problems() []string {
	var out []string
	if o.against != "" && o.pair {
		out = append(out, "-pair and -against each make a run's other side: use one")
	}
	if o.pgLatency != 0 && !slices.Contains(o.paths, "postgres") {
		out = append(out, "-pg-latency delays the Postgres path, which -paths leaves out")
	}
	if o.pgLatency < 0 || o.pgLatency%time.Millisecond != 0 {
		out = append(out, fmt.Sprintf("bad -pg-latency %v: whole milliseconds, 0 for none", o.pgLatency))
	}
	if o.pgPool < 0 || o.pgPool == 1 || o.pgPool == 2 {
		out = append(out, fmt.Sprintf("bad -pg-pool %d: 0 (the store's default) or at least 3", o.pgPool))
	}
	return out
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// run measures every path and concurrency of o and prints the table.
func run(ctx context.Context, o options) error {
	tmp, err := os.MkdirTemp("", "loadbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if o.bin == "" {
		o.bin = filepath.Join(tmp, "gateway")
		if out, err := exec.Command("go", "build", "-o", o.bin, "github.com/fencegate/fencegate/cmd/gateway").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
	}
	if o.fsyncs {
		if _, err := exec.LookPath("strace"); err != nil {
			o.fsyncs = false
		}
	}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return err
		}
	}
	if o.pgLatency > 0 { // problems: only with the postgres path
		pg, stop, err := withLatency(o.pgBase, int(o.pgLatency/time.Millisecond))
		if err != nil {
			return err
		}
		defer stop()
		o.pgBase = pg
		fmt.Fprintf(o.out, "loadbench: every Postgres client goes through a proxy delaying data %v each way (-pg-latency); it runs in loadbench, so loadbench CPU/w includes its forwarding\n", o.pgLatency)
	}
	var with []string
	for _, w := range o.checkWith {
		if _, err := exec.LookPath("wrk"); w == "wrk" && err != nil {
			fmt.Fprintln(o.out, "loadbench: no wrk on PATH (apt-get install wrk): the wrk cross-check is skipped")
			continue
		}
		with = append(with, w)
	}
	o.checkWith = with
	if (o.pair && o.prefill > 0 || o.against != "") && o.runs < 2 {
		fmt.Fprintln(o.out, "loadbench: a pair with -runs 1: its first side always goes first, so the order does not alternate")
	}
	fmt.Fprintf(o.out, "loadbench: 1 KiB bodies, distinct resources, segments 1,2,3... under one grant; %s per point, median of %d; load average %s\n",
		o.d, o.runs, loadavg())
	if o.pgDev {
		fmt.Fprintln(o.out, "postgres, embedded, s3: gateway dev (-pg-dev)")
	} else {
		fmt.Fprintln(o.out, "postgres: gateway serve (config: in-process embedded registry, access rules, local store); embedded, s3: gateway dev")
	}
	fmt.Fprintf(o.out, "%-9s %3s %9s %8s %8s | %-18s %9s %8s %8s | %6s | %7s %9s %8s\n",
		"path", "c", "writes/s", "p50", "p99", "baseline", "writes/s", "p50", "p99", "ratio", "cpu/w", "fsyncs/w", "commit/w")
	stamp := strconv.FormatInt(time.Now().UnixNano()%1e10, 36)
	if o.prefill > 0 && slices.Contains(o.paths, "postgres") {
		// One filled store serves every Postgres point (each on resources
		// of its own): filling takes far longer than a point.
		dbURL, err := benchDB(ctx, o.pgBase, o.pgDB)
		if err != nil {
			return err
		}
		schema := "gw_fill_" + stamp
		if o.filled, err = schemaURL(ctx, dbURL, schema); err != nil {
			return err
		}
		defer dropSchema(ctx, dbURL, schema)
		start := time.Now()
		if err := prefill(ctx, o.filled, o.prefill); err != nil {
			return err
		}
		fmt.Fprintf(o.out, "postgres store pre-filled with %d settled receipts over %d resources in %s\n", o.prefill, max(1, o.prefill/10), time.Since(start).Round(time.Second))
	}
	if o.prefill > 0 && slices.Contains(o.paths, "embedded") {
		o.filledEmbedded = filepath.Join(tmp, "filled", "fencestore.db")
		if err := os.MkdirAll(filepath.Dir(o.filledEmbedded), 0o700); err != nil {
			return err
		}
		start := time.Now()
		if err := prefillEmbedded(ctx, o.filledEmbedded, o.prefill); err != nil {
			return err
		}
		fi, err := os.Stat(o.filledEmbedded)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.out, "embedded store pre-filled with %d settled receipts over %d resources in %s (%d MiB file)\n",
			o.prefill, max(1, o.prefill/10), time.Since(start).Round(time.Second), fi.Size()>>20)
	}
	for _, path := range o.paths {
		for _, c := range o.conc {
			var pts, others []point
			for r := range o.runs {
				tag := fmt.Sprintf("%s%s%dr%d", path[:2], stamp, c, r)
				dir := filepath.Join(tmp, tag)
				if err := os.MkdirAll(dir, 0o700); err != nil {
					return err
				}
				prof := ""
				if o.profile != "" && r == 0 {
					prof = fmt.Sprintf("%s-c%d", path, c)
				}
				var pt, other point
				if o.pairs(path) {
					pt, other, err = measurePair(ctx, o, path, tag, dir, c, r, prof)
					others = append(others, other)
				} else {
					pt, err = measure(ctx, o, path, tag, dir, c, r, prof)
				}
				if err != nil {
					return fmt.Errorf("%s c=%d: %w", path, c, err)
				}
				pts = append(pts, pt)
				_ = os.RemoveAll(dir)
			}
			printPoint(o.out, path, c, pts)
			if o.pairs(path) {
				printPair(o.out, o.pairLabel(), pts, others)
			}
			if o.profile != "" {
				fmt.Fprintf(o.out, "%14s profiles (first run): %s.cpu, .allocs, .trace\n", "", filepath.Join(o.profile, fmt.Sprintf("%s-c%d", path, c)))
			}
		}
	}
	fmt.Fprintln(o.out, legend)
	fmt.Fprintf(o.out, "load average at the end: %s\n", loadavg())
	return nil
}

// point is one run of one point: the gateway through the project's client,
// the baseline, and the cross-checks by generator.
type point struct {
	gw, base sample
	checks   map[string]sample
}

// measure runs one point of path: the gateway (and its cross-checks, on the
// same gateway after the client's window), then the baseline. With prof,
// the gateway serves pprof and the client's window is profiled into
// o.profile/prof.*.
func measure(ctx context.Context, o options, path, tag, dir string, c, run int, prof string) (pt point, err error) {
	sp := gwSpec{bin: o.bin, dir: dir, strace: o.fsyncs, pprof: prof != ""}
	if o.deferSettle != "" {
		sp.extraConfig = "deferSettle: " + o.deferSettle
	}
	store := "local"
	var stats *pgStats
	switch path {
	case "postgres":
		var dbURL string
		dbURL, err = benchDB(ctx, o.pgBase, o.pgDB)
		if err != nil {
			return pt, err
		}
		stats = &pgStats{url: dbURL, db: o.pgDB}
		su := o.filled
		if su == "" {
			su, err = schemaURL(ctx, dbURL, "gw_"+tag)
			if err != nil {
				return pt, err
			}
			defer dropSchema(ctx, dbURL, "gw_"+tag)
		}
		if o.pgPool > 0 {
			if su, err = withParam(su, "pool_max_conns", strconv.Itoa(o.pgPool)); err != nil {
				return pt, err
			}
		}
		sp.serve, sp.fenceStore = !o.pgDev, su
	case "embedded":
		if o.filledEmbedded != "" {
			if err := copyFile(o.filledEmbedded, filepath.Join(dir, "data", "fencestore.db")); err != nil {
				return pt, err
			}
		}
	case "s3":
		store = "s3b"
		sp.args = []string{"--store", "s3b=" + o.s3.storeURL("loadbench/"+tag)}
		sp.env = []string{"AWS_ACCESS_KEY_ID=" + o.s3.accessKey, "AWS_SECRET_ACCESS_KEY=" + o.s3.secretKey}
	default:
		return pt, fmt.Errorf("unknown path %q", path)
	}
	g, err := startGateway(ctx, sp)
	if err != nil {
		return pt, err
	}
	var before pgCounters
	if stats != nil {
		before = stats.settle(ctx)
	}
	var p *profiler
	cnt := counters{}
	if stats != nil {
		if cnt.pgcpu = stats.cpuProbe(ctx); cnt.pgcpu != nil {
			defer cnt.pgcpu.close(ctx)
		}
	}
	if prof != "" {
		p = &profiler{gw: g, dir: o.profile, name: prof}
		cnt.during = p.during
	}
	pt.gw, err = throughGateway(ctx, g, store, tag, c, o.d, cnt)
	if err == nil && p != nil && p.err != nil {
		err = fmt.Errorf("profile: %w", p.err)
	}
	if err == nil && o.checks[fmt.Sprintf("%s:%d", path, c)] {
		pt.checks, err = crossChecks(ctx, o, g, store, tag, dir, c, run)
	}
	g.stop()
	if path == "embedded" {
		if fi, serr := os.Stat(filepath.Join(dir, "data", "fencestore.db")); serr == nil {
			pt.gw.storeBytes = fi.Size()
		}
	}
	if err != nil {
		log, _ := os.ReadFile(g.stderr)
		return pt, fmt.Errorf("%w\ngateway log:\n%s", err, tail(string(log), 3000))
	}
	if stats != nil && len(pt.checks) == 0 {
		// The gateway's sessions have ended, so they have reported; the
		// delta also holds the lease acquisitions' few reads.
		pt.gw.pg = stats.settle(ctx).minus(before)
	}
	if o.checks[fmt.Sprintf("%s:%d", path, c)] && slices.Contains(o.checkWith, "floor") {
		// After the gateway has stopped: the floor has the machine to itself.
		fs := "local:" + filepath.Join(dir, "floor-objects")
		if path == "s3" {
			fs = o.s3.storeURL("loadbench/" + tag + "/floor")
		}
		var fl sample
		if fl, err = floorCheck(ctx, dir, fs, sp.env, c, checkWindow(o.d)); err != nil {
			return pt, fmt.Errorf("floor: %w", err)
		}
		if pt.checks == nil {
			pt.checks = map[string]sample{}
		}
		pt.checks["floor"] = fl
	}
	if o.noBaseline {
		return pt, nil
	}
	switch path {
	case "postgres":
		pt.base, err = runPgbench(ctx, stats, dir, c, o.d, tag)
	case "embedded":
		pt.base, err = boltBaseline(ctx, dir, c, o.d)
	case "s3":
		pt.base, err = s3Baseline(ctx, o.s3, "loadbench/"+tag+"/direct", c, o.d)
	}
	return pt, err
}

// crossChecks runs each generator of o.checkWith on g at c, on fresh
// resources, each for checkWindow(o.d), starting with a different one each
// run (the machine drifts between windows).
func crossChecks(ctx context.Context, o options, g *gateway, store, tag, dir string, c, run int) (map[string]sample, error) {
	out := map[string]sample{}
	for i := range o.checkWith {
		w := o.checkWith[(i+run)%len(o.checkWith)]
		var (
			s   sample
			err error
		)
		switch w {
		case "wrk":
			s, err = viaWrk(ctx, g, store, tag+"wrk", dir, c, checkWindow(o.d))
		case "http":
			s, err = plainHTTP(ctx, g, store, tag+"http", c, checkWindow(o.d))
		case "floor":
			continue // not on the gateway: measure runs it after the gateway stops
		default:
			err = fmt.Errorf("unknown -check-with %q", w)
		}
		if err != nil {
			return nil, fmt.Errorf("cross-check %s: %w", w, err)
		}
		out[w] = s
	}
	return out, nil
}

func median(ss []sample) sample {
	slices.SortFunc(ss, func(a, b sample) int {
		switch {
		case a.rate() < b.rate():
			return -1
		case a.rate() > b.rate():
			return 1
		}
		return 0
	})
	return ss[len(ss)/2]
}

// loadavg is /proc/loadavg's 1, 5 and 15 minute averages.
func loadavg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
