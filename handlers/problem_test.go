package handlers

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestRequestBodiesAreStrictJSONObjects: a JSON body is one object with the
// spec's member names, byte for byte (additionalProperties: false), each
// once, and nothing after it; encoding/json alone takes each of these.
func TestRequestBodiesAreStrictJSONObjects(t *testing.T) {
	const good = `{"resource":"local/a","requestId":"r","ttlMs":1000,"operationId":"o"}`
	for name, body := range map[string]string{
		"trailing brace":        good + `}`,
		"trailing bracket+junk": good + `]garbage`,
		"duplicate member":      `{"resource":"local/a","resource":"local/b","requestId":"r","ttlMs":1000,"operationId":"o"}`,
		"case-folded names":     `{"Resource":"local/a","REQUESTID":"r","ttlms":1000,"operationid":"o"}`,
		"null member":           `{"resource":"local/a","requestId":"r","ttlMs":null,"operationId":"o"}`,
		"required absent":       `{"resource":"local/a","requestId":"r","operationId":"o"}`,
	} {
		var v fencegate.LeaseRequest
		r := httptest.NewRequest("POST", "/v1/leases", strings.NewReader(body))
		err := decodeJSON(r, &v, "resource", "requestId", "operationId", "ttlMs")
		if fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			t.Errorf("%s: %s decoded as %+v (err %v), want INVALID_REQUEST", name, body, v, err)
		}
	}
	var v fencegate.LeaseRequest
	if err := decodeJSON(httptest.NewRequest("POST", "/v1/leases", strings.NewReader(good+"\n")), &v,
		"resource", "requestId", "operationId", "ttlMs"); err != nil || v.TTLMs != 1000 {
		t.Errorf("a strict body: %+v, %v", v, err)
	}
}

// TestEvery401CarriesAChallenge: RFC 9110 §15.5.2 requires WWW-Authenticate
// on every 401, whichever credential was refused; other statuses have none.
func TestEvery401CarriesAChallenge(t *testing.T) {
	note := func(fencegate.Code, int, ...any) {}
	for _, code := range fencegate.Codes {
		w := httptest.NewRecorder()
		writeProblem(w, httptest.NewRequest(http.MethodPut, "/v1/objects/local/k", nil), note, fencegate.Errorf(code, "refused"))
		got := w.Header().Get("WWW-Authenticate")
		if w.Code == http.StatusUnauthorized && got != `Bearer realm="fencegate"` {
			t.Errorf("%s: 401 with WWW-Authenticate %q", code, got)
		}
		if w.Code != http.StatusUnauthorized && got != "" {
			t.Errorf("%s: %d with WWW-Authenticate %q", code, w.Code, got)
		}
	}
}
