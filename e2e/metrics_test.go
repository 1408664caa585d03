package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// scrape reads the operator listener's /metrics as sample -> value, the
// sample written as the exposition writes it (name{labels in name order})
// and the metric family names it declares (# TYPE).
func scrape(t *testing.T, maddr string) (map[string]float64, map[string]string) {
	t.Helper()
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	samples, families := map[string]float64{}, map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			families[name] = typ
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	return samples, families
}

// TestScrapedMetricsMoveThroughAnOutsideFlow drives the built binary through
// acquire, write, replay, quarantine, stale refusal, handoff, shadow mode, an
// UNKNOWN that goes overdue and a fence regression (a second registry over
// the same Postgres fence store), then scrapes the operator listener and
// checks that every series moved, no label names a resource, and the
// shipped alert rules and dashboard name only metrics the binary exports.
func TestScrapedMetricsMoveThroughAnOutsideFlow(t *testing.T) {
	pg := testenv.PostgresURL(t)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // nothing final: UNKNOWN, resent under the same key
	}))
	defer flaky.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	yml := fmt.Sprintf(`fenceStore: %q
registry: {highWater: operator}
modes:
  - {pattern: "local/shadow/*", mode: shadow}
apis:
  - name: flaky
    baseURL: %s
    credentials: {header: Authorization, prefix: "Bearer ", env: FLAKY_TOKEN}
    timeout: 2s
    key: {header: Idempotency-Key}
    contract:
      idempotency: {keyRetention: 24h}
    settle: {strategy: resend, maxAttempts: 2}
    routes:
      - {method: POST, path: "/v1/things/{id}", resource: "flaky/{id}"}
reconcile: {interval: 200ms, deadline: 1s, orphan: 2m}
`, pg, flaky.URL)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"FLAKY_TOKEN=secret"}
	args := func(data string, maddr string) []string {
		return []string{"dev", "--config", cfg, "--data-dir", filepath.Join(dir, data), "--identity", "worker-a=token-a",
			"--identity", "worker-b=token-b", "--metrics-addr", maddr, "--log-format", "json"}
	}

	// A first registry hands out fence 1 for local/reg/x and it is accepted.
	first := startGatewayEnv(t, env, args("first", freePort(t))...)
	l := first.acquire(t, "token-a", "local/reg/x", "r-1", "op-reg", 30000)
	if a := first.put(t, "token-a", l, "local/reg/x", 1, "one"); a.status != http.StatusOK {
		t.Fatalf("first write: %d %s", a.status, a.body)
	}
	first.stop(t)

	maddr := freePort(t)
	p := startGatewayEnv(t, env, args("second", maddr)...)
	// A second registry starts over at fence 1 under another lease: FENCE_REGRESSION.
	l = p.acquire(t, "token-a", "local/reg/x", "r-1", "op-reg", 30000)
	wantCode(t, p.put(t, "token-a", l, "local/reg/x", 1, "two"), http.StatusConflict, "FENCE_REGRESSION")

	// Accepted write, replay, quarantine.
	a1 := p.acquire(t, "token-a", "local/m/1", "m-1", "op-m", 30000)
	if a := p.put(t, "token-a", a1, "local/m/1", 1, "v1"); a.status != http.StatusOK {
		t.Fatalf("write: %d %s", a.status, a.body)
	}
	if a := p.put(t, "token-a", a1, "local/m/1", 1, "v1"); a.status != http.StatusOK {
		t.Fatalf("replay: %d %s", a.status, a.body)
	}
	wantCode(t, p.put(t, "token-a", a1, "local/m/1", 1, "other"), http.StatusConflict, "QUARANTINED")
	// Handoff: a releases, b acquires and writes; a's next segment is stale.
	if a := p.do(t, "DELETE", "/v1/leases/"+a1.id, "token-a", nil, ""); a.status != http.StatusOK {
		t.Fatalf("release: %d %s", a.status, a.body)
	}
	b1 := p.acquire(t, "token-b", "local/m/1", "m-2", "op-m", 30000)
	if a := p.put(t, "token-b", b1, "local/m/1", 1, "v2"); a.status != http.StatusOK {
		t.Fatalf("write after handoff: %d %s", a.status, a.body)
	}
	stale := p.put(t, "token-a", a1, "local/m/1", 2, "late")
	if stale.status != http.StatusConflict && stale.status != http.StatusUnauthorized {
		t.Fatalf("stale write: %d %s", stale.status, stale.body)
	}
	// Shadow mode forwards a skipped segment and records the verdict.
	s1 := p.acquire(t, "token-a", "local/shadow/1", "s-1", "op-s", 30000)
	if a := p.put(t, "token-a", s1, "local/shadow/1", 3, "shadowed"); a.status != http.StatusOK || a.header.Get("Fence-Verdict") != "SEGMENT_OUT_OF_ORDER" {
		t.Fatalf("shadow write: %d %v %s", a.status, a.header, a.body)
	}
	// An upstream answering 500 leaves the call UNKNOWN; past the 1 s deadline it is overdue.
	f1 := p.acquire(t, "token-a", "flaky/t1", "f-1", "op-f", 30000)
	h := fenceHeaders(f1, 1)
	h["Content-Type"] = "application/json"
	wantCode(t, p.do(t, "POST", "/v1/apis/flaky/v1/things/t1", "token-a", h, `{"n":1}`), http.StatusBadGateway, "MUTATION_UNKNOWN")
	// Its replay resends the kept request under the same key (still 503: still UNKNOWN).
	wantCode(t, p.do(t, "POST", "/v1/apis/flaky/v1/things/t1", "token-a", h, `{"n":1}`), http.StatusBadGateway, "MUTATION_UNKNOWN")

	var samples map[string]float64
	var families map[string]string
	for deadline := time.Now().Add(20 * time.Second); ; {
		samples, families = scrape(t, maddr)
		if samples["fencegate_unknown_overdue"] >= 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, s := range []string{
		`fencegate_http_request_duration_seconds_count{method="PUT",outcome="ok",route="/v1/objects/{store}/*"}`,
		`fencegate_http_request_duration_seconds_count{method="PUT",outcome="refused",route="/v1/objects/{store}/*"}`,
		`fencegate_admission_duration_seconds_count{outcome="admitted"}`,
		`fencegate_admission_duration_seconds_count{outcome="replay"}`,
		`fencegate_admission_duration_seconds_count{outcome="QUARANTINED"}`,
		`fencegate_admission_duration_seconds_count{outcome="FENCE_REGRESSION"}`,
		`fencegate_refusals_total{code="QUARANTINED"}`,
		`fencegate_refusals_total{code="FENCE_REGRESSION"}`,
		`fencegate_refusals_total{code="MUTATION_UNKNOWN"}`,
		`fencegate_refusals_total{code="` + stale.str("code") + `"}`,
		`fencegate_effect_duration_seconds_count{backend="objects/local",outcome="COMMITTED"}`,
		`fencegate_effect_duration_seconds_count{backend="apis/flaky",outcome="UNKNOWN"}`,
		`fencegate_settle_duration_seconds_count{outcome="COMMITTED"}`,
		`fencegate_settle_duration_seconds_count{outcome="UNKNOWN"}`,
		`fencegate_backend_errors_total{backend="apis/flaky",code="MUTATION_UNKNOWN"}`,
		`fencegate_receipts_total{state="COMMITTED"}`,
		`fencegate_receipts_total{state="UNKNOWN"}`,
		`fencegate_unknown_receipts`,
		`fencegate_unknown_oldest_age_seconds`,
		`fencegate_unknown_overdue`,
		`fencegate_fence_regressions_total`,
		`fencegate_fence_regression_last_timestamp_seconds`,
		`fencegate_fence_regression_last_fence`,
		`fencegate_shadow_verdicts_total{code="SEGMENT_OUT_OF_ORDER",pattern="local/shadow/*"}`,
		`fencegate_lock_handoff_seconds_count{stage="grant"}`,
		`fencegate_lock_handoff_seconds_count{stage="write"}`,
		`fencegate_lock_handoff_seconds_count{stage="total"}`,
		`fencegate_proof_cache_hits_total{kind="grant"}`,
		`fencegate_proof_cache_misses_total{kind="grant"}`,
		`fencegate_proof_cache_hits_total{kind="status"}`,
		`fencegate_proof_cache_misses_total{kind="status"}`,
		`fencegate_upstream_resends_total{api="flaky",reason="unknown"}`,
		`fencegate_store_batches_total`,
		`fencegate_store_batched_writes_total`,
		`go_goroutines`,
		`process_resident_memory_bytes`,
	} {
		if samples[s] <= 0 {
			t.Errorf("%s did not move (%v)", s, samples[s])
		}
	}
	// Every admission and settle of the flow went through the fence store's
	// group commit: at least one write per batch.
	if b, w := samples[`fencegate_store_batches_total`], samples[`fencegate_store_batched_writes_total`]; w < b {
		t.Errorf("fence store: %v writes in %v batches", w, b)
	}
	for _, s := range []string{`fencegate_store_errors_total{op="admit"}`, `fencegate_registry_grants_paused`, `fencegate_registry_state_losses_total`} {
		if _, ok := samples[s]; !ok {
			t.Errorf("%s is not exported", s)
		}
	}
	var build bool
	for s, v := range samples {
		if strings.Contains(s, "local/m/1") || strings.Contains(s, "local/reg/x") || strings.Contains(s, "worker-a") {
			t.Errorf("a label names a resource or caller: %s", s)
		}
		build = build || (strings.HasPrefix(s, "fencegate_build_info{") && v == 1)
	}
	if !build {
		t.Error("no fencegate_build_info")
	}
	// Every log line of a refused request names the request.
	if !strings.Contains(p.logs.String(), `"msg":"request refused"`) || !strings.Contains(p.logs.String(), `"requestId":"req_`) {
		t.Errorf("JSON refusal lines without a request ID:\n%.3000s", p.logs.String())
	}
	checkShippedQueriesNameExportedMetrics(t, families)
}

// metricName matches the metric names a PromQL expression may use.
var metricName = regexp.MustCompile(`\b(?:fencegate|go|process)_[a-z0-9_]+\b|\bfencegate:[a-z0-9_:]+\b`)

// checkShippedQueriesNameExportedMetrics: each metric that
// deploy/prometheus/alerts.yaml and deploy/grafana/fencegate.json query is
// one the binary exports (a histogram by its _bucket, _sum or _count), or a
// recording rule of alerts.yaml.
func checkShippedQueriesNameExportedMetrics(t *testing.T, families map[string]string) {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	exprs := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
			exprs[r.Expr] = "alerts.yaml"
		}
	}
	b, err = os.ReadFile(filepath.Join("..", "deploy", "grafana", "fencegate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs[tg.Expr] = "fencegate.json"
		}
	}
	for _, v := range dash.Templating.List {
		exprs[v.Definition] = "fencegate.json"
	}
	exported := func(name string) bool {
		if _, ok := families[name]; ok || recorded[name] {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && families[base] == "histogram" {
				return true
			}
		}
		return false
	}
	n := 0
	for expr, file := range exprs {
		for _, name := range metricName.FindAllString(expr, -1) {
			n++
			if !exported(name) {
				t.Errorf("%s queries %s, which the binary does not export: %s", file, name, expr)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d metric references found in the shipped rules and dashboard", n)
	}
}
