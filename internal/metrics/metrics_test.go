package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/metrics"
)

// TestNoSeriesIsLabelledByResourceKeyOrCaller: whatever the observers are
// told about resources, the exposition never names one: a regression is one
// counter plus last-seen gauges, not a series per resource.
func TestNoSeriesIsLabelledByResourceKeyOrCaller(t *testing.T) {
	m := metrics.New()
	now := time.Unix(1700000000, 0)
	for _, res := range []string{"local/inv/1", "local/inv/2", "local/inv/3"} {
		m.FenceRegression(res, 7, nil)
		m.ShadowVerdict(res, "local/roll/*", fencegate.CodeStaleOwner)
		m.Handoff(res, 3, now, now.Add(time.Millisecond))
		m.FirstWrite(res, 3, now.Add(time.Millisecond), now.Add(3*time.Millisecond))
	}
	m.Request("/v1/objects/{store}/*", "BREW", 418, time.Millisecond)
	text := scrape(t, m)
	if strings.Contains(text, "local/inv") {
		t.Fatalf("a resource is a label:\n%s", text)
	}
	for _, want := range []string{
		"fencegate_fence_regressions_total 3", "fencegate_fence_regression_last_fence 7",
		`fencegate_shadow_verdicts_total{code="STALE_OWNER",pattern="local/roll/*"} 3`,
		`fencegate_lock_handoff_seconds_count{stage="total"} 3`, `method="other"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s in\n%s", want, text)
		}
	}
}

// TestHandoffTotalNeedsBothHalves: the whole handoff is observed only for a
// fence whose predecessor's end this process saw, once.
func TestHandoffTotalNeedsBothHalves(t *testing.T) {
	m := metrics.New()
	now := time.Unix(1700000000, 0)
	m.FirstWrite("r", 1, now, now.Add(time.Millisecond)) // no end seen: write stage only
	m.Handoff("r", 2, now, now.Add(time.Millisecond))
	m.FirstWrite("r", 2, now.Add(time.Millisecond), now.Add(2*time.Millisecond))
	m.FirstWrite("r", 2, now.Add(time.Millisecond), now.Add(2*time.Millisecond))
	out := scrape(t, m)
	for _, want := range []string{`fencegate_lock_handoff_seconds_count{stage="write"} 3`,
		`fencegate_lock_handoff_seconds_count{stage="total"} 1`, `fencegate_lock_handoff_seconds_count{stage="grant"} 1`} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %s in\n%s", want, out)
		}
	}
}

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(w.Result().Body)
	return string(b)
}

// TestDeferredSettlesGaugeIsScraped: the gauge starts at 0 and shows the last
// count the gateway told it.
func TestDeferredSettlesGaugeIsScraped(t *testing.T) {
	m := metrics.New()
	if out := scrape(t, m); !strings.Contains(out, "fencegate_deferred_settles 0") {
		t.Fatalf("no zero gauge in\n%s", out)
	}
	m.Deferred(3)
	m.Deferred(2)
	if out := scrape(t, m); !strings.Contains(out, "fencegate_deferred_settles 2") {
		t.Fatalf("missing fencegate_deferred_settles 2 in\n%s", out)
	}
}

// TestStagedWritesCountEachOutcome: every outcome starts at 0 and counts
// what the gateway told it, by outcome.
func TestStagedWritesCountEachOutcome(t *testing.T) {
	m := metrics.New()
	out := scrape(t, m)
	for _, o := range []string{"used", "discarded", "failed"} {
		if !strings.Contains(out, `fencegate_staged_writes_total{outcome="`+o+`"} 0`) {
			t.Fatalf("no zero series for %s in\n%s", o, out)
		}
	}
	m.Staged("used")
	m.Staged("used")
	m.Staged("discarded")
	out = scrape(t, m)
	for _, want := range []string{`fencegate_staged_writes_total{outcome="used"} 2`, `fencegate_staged_writes_total{outcome="discarded"} 1`,
		`fencegate_staged_writes_total{outcome="failed"} 0`} {
		if !strings.Contains(out, want) {
			t.Fatalf("missing %s in\n%s", want, out)
		}
	}
}

// TestPerWriteSeriesCountEveryObservationUnderItsLabels: the series a write's
// observations are bound to (remembered per label set) are the vectors' own:
// each label set counts exactly its observations, from the first one on,
// also when many goroutines bind the same new label sets at once.
func TestPerWriteSeriesCountEveryObservationUnderItsLabels(t *testing.T) {
	m := metrics.New()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				m.Request("/v1/objects/{store}/*", "PUT", 200, time.Millisecond)
				m.Admission("admitted", time.Millisecond)
				m.Effect("objects/local", fencegate.ReceiptCommitted, "", time.Millisecond)
				m.Settle(fencegate.ReceiptCommitted, time.Millisecond)
				m.Settled(fencegate.ReceiptCommitted)
			}
		})
	}
	wg.Wait()
	m.Request("/v1/objects/{store}/*", "PUT", 409, time.Millisecond)
	m.Refused(fencegate.CodeStaleOwner)
	m.Admission("STALE_OWNER", time.Millisecond)
	m.Effect("objects/local", fencegate.ReceiptUnknown, fencegate.CodeMutationUnknown, time.Millisecond)
	m.Settled(fencegate.ReceiptUnknown)
	text := scrape(t, m)
	for _, want := range []string{
		`fencegate_http_request_duration_seconds_count{method="PUT",outcome="ok",route="/v1/objects/{store}/*"} 40`,
		`fencegate_http_request_duration_seconds_count{method="PUT",outcome="refused",route="/v1/objects/{store}/*"} 1`,
		`fencegate_admission_duration_seconds_count{outcome="admitted"} 40`,
		`fencegate_admission_duration_seconds_count{outcome="STALE_OWNER"} 1`,
		`fencegate_effect_duration_seconds_count{backend="objects/local",outcome="COMMITTED"} 40`,
		`fencegate_effect_duration_seconds_count{backend="objects/local",outcome="UNKNOWN"} 1`,
		`fencegate_backend_errors_total{backend="objects/local",code="MUTATION_UNKNOWN"} 1`,
		`fencegate_settle_duration_seconds_count{outcome="COMMITTED"} 40`,
		`fencegate_receipts_total{state="COMMITTED"} 40`, `fencegate_receipts_total{state="UNKNOWN"} 1`,
		`fencegate_refusals_total{code="STALE_OWNER"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s in\n%s", want, text)
		}
	}
}

// TestFenceStoreBatchesReadTheStoreAtScrape: the group-commit counters are
// the store's own, read when scraped, so writes per batch is their ratio.
func TestFenceStoreBatchesReadTheStoreAtScrape(t *testing.T) {
	m := metrics.New()
	var batches, writes uint64 = 3, 7
	m.FenceStoreBatches(func() (uint64, uint64) { return batches, writes })
	out := scrape(t, m)
	if !strings.Contains(out, "fencegate_store_batches_total 3") || !strings.Contains(out, "fencegate_store_batched_writes_total 7") {
		t.Fatalf("missing the store's counters in\n%s", out)
	}
	batches, writes = 5, 20
	out = scrape(t, m)
	if !strings.Contains(out, "fencegate_store_batches_total 5") || !strings.Contains(out, "fencegate_store_batched_writes_total 20") {
		t.Fatalf("the counters did not follow the store in\n%s", out)
	}
}
