package app

import (
	"net/http"
	"strings"
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

// TestBackendFaultSeriesStartAtZero: the built gateway exposes
// fencegate_backend_errors_total at 0 for each configured backend and fault
// code before any effect ran, so that the first fault is an increase
// Prometheus sees (FencegateBackendUnavailable); a series born at 1 is not.
func TestBackendFaultSeriesStartAtZero(t *testing.T) {
	rw := newRouteWorld(t)
	for _, backend := range []string{"objects/local", "apis/payouts"} {
		for _, code := range []string{"BACKEND_UNAVAILABLE", "MUTATION_UNKNOWN"} {
			v, ok := counter(t, rw.app, "fencegate_backend_errors_total", map[string]string{"backend": backend, "code": code})
			if !ok || v != 0 {
				t.Errorf("fencegate_backend_errors_total{backend=%s,code=%s}: exposed %v, value %v; want exposed at 0", backend, code, ok, v)
			}
		}
	}
}

// refusalCount reads fencegate_refusals_total{code} from the app's registry.
func refusalCount(t *testing.T, a *App, code string) float64 {
	t.Helper()
	v, _ := counter(t, a, "fencegate_refusals_total", map[string]string{"code": code})
	return v
}

// counter reads the counter name{labels} from the app's registry, and
// whether it is exposed at all.
func counter(t *testing.T, a *App, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := a.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			n := 0
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok {
					if l.GetValue() != want {
						continue series
					}
					n++
				}
			}
			if n == len(labels) {
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// TestS3RefusalsAreCountedLikeTheRESTAPIs: a problem answer of the S3 front
// door is counted in fencegate_refusals_total under its Fencegate code, as
// the REST API's are: a signed PUT outside the lease's resource is
// RESOURCE_MISMATCH, a request signed with the wrong secret (S3's
// SignatureDoesNotMatch) UNAUTHENTICATED.
func TestS3RefusalsAreCountedLikeTheRESTAPIs(t *testing.T) {
	rw := newRouteWorld(t)
	_, k := rw.acquireS3("token-a", "local/s3count/a", "s3count")
	mismatch, unauthenticated := refusalCount(t, rw.app, "RESOURCE_MISMATCH"), refusalCount(t, rw.app, "UNAUTHENTICATED")
	if code, out := rw.s3("PUT", "/local/s3count/b", k, "x"); code != http.StatusForbidden || !strings.Contains(out, "RESOURCE_MISMATCH") {
		t.Fatalf("PUT outside the lease's resource: %d %s; want 403 RESOURCE_MISMATCH", code, out)
	}
	if got := refusalCount(t, rw.app, "RESOURCE_MISMATCH"); got != mismatch+1 {
		t.Fatalf("fencegate_refusals_total{code=RESOURCE_MISMATCH} = %v after an S3 RESOURCE_MISMATCH, want %v", got, mismatch+1)
	}
	if code, out := rw.s3("GET", "/local/s3count/a", s3Keys{akid: k.akid, secret: "wrong"}, ""); code != http.StatusForbidden ||
		!strings.Contains(out, "SignatureDoesNotMatch") {
		t.Fatalf("GET signed with the wrong secret: %d %s; want 403 SignatureDoesNotMatch", code, out)
	}
	if got := refusalCount(t, rw.app, "UNAUTHENTICATED"); got != unauthenticated+1 {
		t.Fatalf("fencegate_refusals_total{code=UNAUTHENTICATED} = %v after a bad S3 signature, want %v", got, unauthenticated+1)
	}
	// A DeleteObjects answers 200 with one key refused: that key is counted too.
	doc := `<Delete><Object><Key>s3count/b</Key></Object></Delete>`
	if code, out := rw.s3("POST", "/local?delete", k, doc); code != http.StatusOK || !strings.Contains(out, "RESOURCE_MISMATCH") {
		t.Fatalf("DeleteObjects of a key outside the lease's resource: %d %s; want 200 with its key refused", code, out)
	}
	if got := refusalCount(t, rw.app, "RESOURCE_MISMATCH"); got != mismatch+2 {
		t.Fatalf("fencegate_refusals_total{code=RESOURCE_MISMATCH} = %v after a DeleteObjects key refused, want %v", got, mismatch+2)
	}
}
