package handlers

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencegate/fencegate"
)

// TestStoreFaultIsRetryableUnavailable: BACKEND_UNAVAILABLE answers 503 with
// Retry-After (a client retries instead of giving up); INTERNAL has none.
func TestStoreFaultIsRetryableUnavailable(t *testing.T) {
	note := func(fencegate.Code, int, ...any) {}
	for _, tc := range []struct {
		err        error
		status     int
		retryAfter string
	}{
		{fencegate.Wrap(errors.New("dial tcp: connection refused"), fencegate.CodeBackendUnavailable, "fence store: admit"), 503, "1"},
		{fencegate.Errorf(fencegate.CodeResourceBusy, "busy"), 409, "1"},
		{errors.New("a bug"), 500, ""},
	} {
		w := httptest.NewRecorder()
		writeProblem(w, httptest.NewRequest(http.MethodGet, "/v1/receipts", nil), note, tc.err)
		if w.Code != tc.status || w.Header().Get("Retry-After") != tc.retryAfter {
			t.Errorf("%v: %d Retry-After %q, want %d %q", tc.err, w.Code, w.Header().Get("Retry-After"), tc.status, tc.retryAfter)
		}
	}
}
