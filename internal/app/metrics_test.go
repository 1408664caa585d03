package app

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestEveryRefusalIsCounted: fencegate_refusals_total{code} counts each
// problem answer, also those the refusal log leaves out.
func TestEveryRefusalIsCounted(t *testing.T) {
	rw := newRouteWorld(t)
	const n = 40
	for range n {
		if status, _ := rw.do(http.MethodGet, "/v1/no-such-route", "", nil, ""); status != http.StatusNotFound {
			t.Fatalf("unknown route answered %d", status)
		}
	}
	if got := testutil.ToFloat64(rw.app.metrics.refusals.WithLabelValues("NOT_FOUND")); got != n {
		t.Fatalf("fencegate_refusals_total{code=NOT_FOUND} = %v, want %d", got, n)
	}
}
