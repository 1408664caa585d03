// Command loadbench measures fenced writes through the built gateway on each
// fence/object store and, in the same run, the baseline each path is held
// against:
//
//   - postgres: `gateway dev --fence-store postgres://...` with the local
//     object store, against pgbench running one transaction of a fence-row
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
// -fsyncs), and for Postgres the commits and WAL syncs per write. Every point
// starts a fresh gateway on a fresh store; -runs N keeps the median run.
// scripts/bench.sh wraps it. It asserts nothing: it reports.
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
}

func main() {
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
	flag.IntVar(&o.prefill, "prefill", 0, "receipts to bulk-insert (SQL) into the Postgres store before each point")
	flag.Parse()
	o.s3.region = "us-east-1"
	o.paths = strings.Split(*paths, ",")
	for _, s := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "loadbench: bad -c %q\n", s)
			os.Exit(2)
		}
		o.conc = append(o.conc, n)
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
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
	fmt.Fprintf(o.out, "loadbench: 1 KiB bodies, distinct resources, segments 1,2,3... under one grant; %s per point, median of %d\n", o.d, o.runs)
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
	for _, path := range o.paths {
		for _, c := range o.conc {
			var gws, bases []sample
			for r := range o.runs {
				tag := fmt.Sprintf("%s%s%dr%d", path[:2], stamp, c, r)
				dir := filepath.Join(tmp, tag)
				if err := os.MkdirAll(dir, 0o700); err != nil {
					return err
				}
				gw, base, err := measure(ctx, o, path, tag, dir, c)
				if err != nil {
					return fmt.Errorf("%s c=%d: %w", path, c, err)
				}
				gws, bases = append(gws, gw), append(bases, base)
				_ = os.RemoveAll(dir)
			}
			printRow(o.out, path, c, median(gws), median(bases))
		}
	}
	fmt.Fprintln(o.out, "cpu/w: gateway CPU (user+system) per write; fsyncs/w: the gateway's fsync/fdatasync/sync_file_range calls per write"+
		" (strace); commit/w and walsync/w: Postgres xact_commit of the bench database and wal_sync of the whole server, per write")
	return nil
}

// measure runs one point of path: the gateway, then the baseline.
func measure(ctx context.Context, o options, path, tag, dir string, c int) (gw, base sample, err error) {
	var (
		args  []string
		env   []string
		store = "local"
		stats *pgStats
	)
	switch path {
	case "postgres":
		var dbURL string
		dbURL, err = benchDB(ctx, o.pgBase, o.pgDB)
		if err != nil {
			return gw, base, err
		}
		stats = &pgStats{url: dbURL, db: o.pgDB}
		su := o.filled
		if su == "" {
			su, err = schemaURL(ctx, dbURL, "gw_"+tag)
			if err != nil {
				return gw, base, err
			}
			defer dropSchema(ctx, dbURL, "gw_"+tag)
		}
		args = []string{"--fence-store", su}
	case "embedded":
	case "s3":
		store = "s3b"
		args = []string{"--store", fmt.Sprintf("s3b=s3://%s/loadbench/%s?endpoint=%s&region=%s&pathStyle=true",
			o.s3.bucket, tag, o.s3.endpoint, o.s3.region)}
		env = []string{"AWS_ACCESS_KEY_ID=" + o.s3.accessKey, "AWS_SECRET_ACCESS_KEY=" + o.s3.secretKey}
	default:
		return gw, base, fmt.Errorf("unknown path %q", path)
	}
	g, err := startGateway(ctx, o.bin, dir, env, o.fsyncs, args...)
	if err != nil {
		return gw, base, err
	}
	var before pgCounters
	if stats != nil {
		before = stats.settle(ctx)
	}
	gw, err = throughGateway(ctx, g, store, tag, c, o.d, nil)
	g.stop()
	if err != nil {
		log, _ := os.ReadFile(g.stderr)
		return gw, base, fmt.Errorf("%w\ngateway log:\n%s", err, tail(string(log), 3000))
	}
	if stats != nil {
		// The gateway's sessions have ended, so they have reported; the
		// delta also holds the lease acquisitions' few reads.
		gw.pg = stats.settle(ctx).minus(before)
	}
	switch path {
	case "postgres":
		base, err = runPgbench(ctx, stats, dir, c, o.d, tag)
	case "embedded":
		base, err = boltBaseline(ctx, dir, c, o.d)
	case "s3":
		base, err = s3Baseline(ctx, o.s3, "loadbench/"+tag+"/direct", c, o.d)
	}
	return gw, base, err
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

var baselineName = map[string]string{"postgres": "pgbench", "embedded": "bbolt+file", "s3": "direct PUT"}

func printRow(w io.Writer, path string, c int, gw, base sample) {
	perWrite := func(n int64, s sample) string {
		if s.writes == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(n)/float64(s.writes))
	}
	cpu, syncs, commits := "-", "-", "-"
	if gw.writes > 0 {
		cpu = fmt.Sprintf("%.2fms", float64(gw.cpu)/float64(time.Millisecond)/float64(gw.writes))
		if gw.syncs >= 0 {
			syncs = perWrite(int64(gw.syncs), gw)
		}
		if gw.pg.valid {
			commits = perWrite(gw.pg.commits, gw) + " walsync/w " + perWrite(gw.pg.walSyncs, gw)
		}
	}
	ratio := 0.0
	if base.rate() > 0 {
		ratio = gw.rate() / base.rate()
	}
	fmt.Fprintf(w, "%-9s %3d %9.0f %8s %8s | %-18s %9.0f %8s %8s | %5.2fx | %7s %9s %s\n",
		path, c, gw.rate(), round(gw.pct(0.5)), round(gw.pct(0.99)),
		baselineName[path], base.rate(), round(base.pct(0.5)), round(base.pct(0.99)), ratio, cpu, syncs, commits)
	if base.pg.valid && base.writes > 0 {
		fmt.Fprintf(w, "%-9s %3s %9s %8s %8s | %-18s commit/w %s walsync/w %s\n", "", "", "", "", "", "  (pgbench)",
			perWrite(base.pg.commits, base), perWrite(base.pg.walSyncs, base))
	}
}

func round(d time.Duration) string {
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	default:
		return d.Round(10 * time.Microsecond).String()
	}
}
