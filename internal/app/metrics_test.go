package app

import (
	"net/http"
	"testing"
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
	if got := refusalCount(t, rw.app, "NOT_FOUND"); got != n {
		t.Fatalf("fencegate_refusals_total{code=NOT_FOUND} = %v, want %d", got, n)
	}
}

// refusalCount reads fencegate_refusals_total{code} from the app's registry.
func refusalCount(t *testing.T, a *App, code string) float64 {
	t.Helper()
	mfs, err := a.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fencegate_refusals_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == code {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
