package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

func TestMain(m *testing.M) {
	floorMain() // the floor check starts this test binary again as its server
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

// TestSmokeEmbeddedPointPrintsRatioStagesCheckAndProfiles runs the embedded
// path for half a second at c=1 against the built gateway, with the plain
// net/http cross-check and -profile: the row names a nonzero rate for the
// gateway and the baseline and their ratio; the stage line counts the
// window's requests from the gateway's own histograms with a nonzero
// admission time; the cross-check names a nonzero rate; and a CPU profile
// (gzip) and an execution trace ("go 1.N trace") are saved for the point.
// It checks that the bench runs and reports, not how fast anything is.
func TestSmokeEmbeddedPointPrintsRatioStagesCheckAndProfiles(t *testing.T) {
	var out bytes.Buffer
	prof := t.TempDir()
	err := run(context.Background(), options{paths: []string{"embedded"}, conc: []int{1}, d: 500 * time.Millisecond,
		runs: 1, bin: testenv.GatewayBinary(t), out: &out, profile: prof,
		checks: map[string]bool{"embedded:1": true}, checkWith: []string{"http", "floor"}})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	row := regexp.MustCompile(`(?m)^embedded +1 +([0-9]+) .*\| bbolt\+file +([0-9]+) .*\| +([0-9.]+)x \|`).FindStringSubmatch(text)
	if row == nil || row[1] == "0" || row[2] == "0" {
		t.Fatalf("no embedded row with rates in:\n%s", text)
	}
	st := regexp.MustCompile(`stages ms/write: request ([0-9.]+) = admission ([0-9.]+) \+ effect ([0-9.]+) (?:\+ settle [0-9.]+ )?\+ rest -?[0-9.]+ \(([0-9]+) requests\) \| loadbench CPU/w ([0-9.]+)ms`).FindStringSubmatch(text)
	if st == nil {
		t.Fatalf("no stage line in:\n%s", text)
	}
	if n, _ := strconv.Atoi(st[4]); n == 0 || st[2] == "0.00" {
		t.Fatalf("stage line without requests or admission time: %s", st[0])
	}
	// The fence store's group commit, from the gateway's counters: every
	// batch carries at least one write, and the row's commit/w is batches
	// per write: at c=1 an admission and a settle each, about 2 (a write
	// at the window's edge may count on one side only).
	fs := regexp.MustCompile(`\| fence store ([0-9.]+) writes per batch`).FindStringSubmatch(text)
	if v, err := strconv.ParseFloat(group1(fs), 64); err != nil || v < 1 {
		t.Fatalf("no fence store writes per batch of at least 1 in:\n%s", text)
	}
	cw := regexp.MustCompile(`(?m)^embedded +1 .* ([0-9.]+)$`).FindStringSubmatch(text)
	if v, err := strconv.ParseFloat(group1(cw), 64); err != nil || v < 1.5 || v > 2.5 {
		t.Fatalf("no embedded commit/w of about 2 in:\n%s", text)
	}
	if ck := regexp.MustCompile(`cross-check at c=1: http ([0-9]+)/s`).FindStringSubmatch(text); ck == nil || ck[1] == "0" {
		t.Fatalf("no cross-check rate in:\n%s", text)
	}
	if fl := regexp.MustCompile(`floor at c=1 .*: floor ([0-9]+)/s .*server cpu/w ([0-9.]+)ms`).FindStringSubmatch(text); fl == nil || fl[1] == "0" {
		t.Fatalf("no floor rate and server CPU in:\n%s", text)
	}
	if strings.Contains(text, "NOT OK") {
		t.Fatalf("a cross-check write was refused:\n%s", text)
	}
	cpu, err := os.ReadFile(filepath.Join(prof, "embedded-c1.cpu"))
	if err != nil || len(cpu) < 2 || cpu[0] != 0x1f || cpu[1] != 0x8b {
		t.Fatalf("CPU profile: %v (%d bytes)", err, len(cpu))
	}
	tr, err := os.ReadFile(filepath.Join(prof, "embedded-c1.trace"))
	if err != nil || !regexp.MustCompile(`^go 1\.[0-9]+ trace`).Match(tr) {
		t.Fatalf("execution trace: %v (%.20q)", err, tr)
	}
}

// TestWrkCrossCheckWritesEverySegmentInOrder drives a gateway with the wrk
// script at 2 connections: every answer is a success, so each connection's
// segments went 1, 2, 3 ... (a gap at the start or a repeat out of order is
// a 409 the sample counts).
func TestWrkCrossCheckWritesEverySegmentInOrder(t *testing.T) {
	testenv.Tool(t, "wrk", "apt-get install wrk")
	dir := t.TempDir()
	g, err := startGateway(context.Background(), gwSpec{bin: testenv.GatewayBinary(t), dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer g.stop()
	s, err := viaWrk(context.Background(), g, "local", "wrktest", dir, 2, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s.writes < 4 || s.errs != 0 {
		t.Fatalf("wrk: %d writes, %d not OK", s.writes, s.errs)
	}
	if st := s.stages; !st.valid || st.req.count < int64(s.writes) {
		t.Fatalf("the gateway counted %d PUTs for wrk's %d successes", st.req.count, s.writes)
	}
}

// TestStagesKeepOnlyFencedPutSeries: the scrape sums the PUT object route's
// successful requests, admitted admissions and object effects, and nothing
// else (leases, refusals, API effects, buckets).
func TestStagesKeepOnlyFencedPutSeries(t *testing.T) {
	const text = `# HELP fencegate_admission_duration_seconds x
fencegate_admission_duration_seconds_bucket{outcome="admitted",le="0.001"} 3
fencegate_admission_duration_seconds_sum{outcome="admitted"} 0.5
fencegate_admission_duration_seconds_count{outcome="admitted"} 10
fencegate_admission_duration_seconds_sum{outcome="STALE_OWNER"} 9
fencegate_admission_duration_seconds_count{outcome="STALE_OWNER"} 9
fencegate_effect_duration_seconds_sum{backend="objects/local",outcome="COMMITTED"} 0.25
fencegate_effect_duration_seconds_count{backend="objects/local",outcome="COMMITTED"} 10
fencegate_effect_duration_seconds_sum{backend="apis/payouts",outcome="COMMITTED"} 7
fencegate_effect_duration_seconds_count{backend="apis/payouts",outcome="COMMITTED"} 7
fencegate_http_request_duration_seconds_sum{method="POST",outcome="ok",route="/v1/leases"} 3
fencegate_http_request_duration_seconds_count{method="POST",outcome="ok",route="/v1/leases"} 3
fencegate_http_request_duration_seconds_sum{method="PUT",outcome="refused",route="/v1/objects/{store}/*"} 4
fencegate_http_request_duration_seconds_count{method="PUT",outcome="refused",route="/v1/objects/{store}/*"} 4
fencegate_http_request_duration_seconds_sum{method="PUT",outcome="ok",route="/v1/objects/{store}/*"} 1
fencegate_http_request_duration_seconds_count{method="PUT",outcome="ok",route="/v1/objects/{store}/*"} 10
# TYPE fencegate_store_batches_total counter
fencegate_store_batches_total 8
fencegate_store_batched_writes_total 20
fencegate_staged_writes_total{outcome="used"} 6
fencegate_staged_writes_total{outcome="discarded"} 2
fencegate_staged_writes_total{outcome="failed"} 1
`
	st := parseStages(strings.NewReader(text))
	want := stages{valid: true, req: series{1, 10}, adm: series{0.5, 10}, eff: series{0.25, 10}, batches: 8, batched: 20, staged: 6}
	if st != want {
		t.Fatalf("parsed %+v, want %+v", st, want)
	}
	if d := want.minus(stages{valid: true, req: series{0.5, 4}, batches: 2, batched: 4}); d.req != (series{0.5, 6}) || d.adm != want.adm ||
		d.batches != 6 || d.batched != 16 {
		t.Fatalf("difference of scrapes: %+v", d)
	}
	if d := want.minus(stages{}); d.valid {
		t.Fatal("a difference with a failed scrape is valid")
	}
}

// TestProfilesFallInsideTheWindow: the CPU profile covers the middle of the
// window in whole seconds and the trace at most traceFor, both inside the
// window once it is at least 1 s.
func TestProfilesFallInsideTheWindow(t *testing.T) {
	for _, d := range []time.Duration{time.Second, 3 * time.Second, 5 * time.Second, 10 * time.Second} {
		cpuAt, cpuFor, trAt, trFor := profileWindow(d)
		if cpuFor%time.Second != 0 || cpuFor < time.Second || cpuAt < 0 || cpuAt+cpuFor > d {
			t.Errorf("d=%s: CPU profile %s+%s", d, cpuAt, cpuFor)
		}
		if trFor > traceFor || trAt < 0 || trAt+trFor > d {
			t.Errorf("d=%s: trace %s+%s", d, trAt, trFor)
		}
	}
}

// TestWrkDoneLineIsTheSample: successes are requests minus non-2xx answers,
// the window and quantiles are wrk's, socket errors count as not OK.
func TestWrkDoneLineIsTheSample(t *testing.T) {
	out := []byte("Running 1s test\nLOADBENCH requests=1000 non2xx=3 sockerr=1 us=2000000 p50=7000 p99=21000\n")
	s, err := wrkSample(out, snap{syncs: -1}, snap{syncs: -1}, counters{})
	if err != nil {
		t.Fatal(err)
	}
	if s.writes != 997 || s.errs != 4 || s.window != 2*time.Second || s.rate() != 498.5 ||
		s.pct(0.5) != 7*time.Millisecond || s.pct(0.99) != 21*time.Millisecond {
		t.Fatalf("sample %+v", s)
	}
	if _, err := wrkSample([]byte("wrk: connection refused"), snap{}, snap{}, counters{}); err == nil {
		t.Fatal("no done line parsed as a sample")
	}
}

// group1 is a submatch's first group, "" when it did not match.
func group1(m []string) string {
	if len(m) < 2 {
		return ""
	}
	return m[1]
}

// TestGroupCommitColumnsAreRatiosOfTheCounters: the stage line's writes per
// batch is batched writes over batches (and the share staged, staged uses
// over requests), and commit/w on a gateway dev path
// is batches over the client's writes; the Postgres path keeps "-" there
// without its server's counters (never the gateway's batches).
func TestGroupCommitColumnsAreRatiosOfTheCounters(t *testing.T) {
	gw := sample{writes: 10, stages: stages{valid: true, req: series{0.1, 10}, batches: 8, batched: 20, staged: 4}}
	if line := stageLine(gw); !strings.HasSuffix(line, "| fence store 2.50 writes per batch | staged 40%") {
		t.Errorf("stage line %q, want 2.50 writes per batch and 4 of 10 writes staged", line)
	}
	var b bytes.Buffer
	printRow(&b, "embedded", 8, gw, sample{})
	if row := strings.TrimSpace(b.String()); !strings.HasSuffix(row, " 0.80") {
		t.Errorf("embedded row %q, want commit/w 0.80", row)
	}
	b.Reset()
	printRow(&b, "postgres", 8, gw, sample{})
	if row := strings.TrimSpace(b.String()); !strings.HasSuffix(row, " -") {
		t.Errorf("postgres row without server counters %q, want commit/w -", row)
	}
}

// TestEveryBadSettingIsReportedAtOnce: settings that cannot run together or
// at all are each named, all in one report, before anything starts; the
// defaults and a valid combination have none.
func TestEveryBadSettingIsReportedAtOnce(t *testing.T) {
	bad := options{paths: []string{"embedded"}, pair: true, against: "/bin/gw-old", pgLatency: 1500 * time.Microsecond, pgPool: 2}
	got := bad.problems()
	for _, want := range []string{"-pair and -against", "-pg-latency delays the Postgres path", "bad -pg-latency 1.5ms", "bad -pg-pool 2"} {
		if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("problems %q: none says %q", got, want)
		}
	}
	if len(got) != 4 {
		t.Errorf("problems %q, want 4", got)
	}
	for _, ok := range []options{{paths: []string{"postgres", "embedded", "s3"}},
		{paths: []string{"postgres"}, against: "/bin/gw-old", pgLatency: time.Millisecond, pgPool: 3}} {
		if p := ok.problems(); len(p) != 0 {
			t.Errorf("%+v: problems %q, want none", ok, p)
		}
	}
}
