package handlers_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
)

// holders is a fixed table of live leases by resource (none here).
type holders map[string]fencegate.Lease

func (h holders) Holder(_ context.Context, resource string) (fencegate.Lease, error) {
	if l, ok := h[resource]; ok {
		return l, nil
	}
	return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeNotFound, "no live lease")
}

// chunked sends an admin request with a chunked body (no Content-Length).
func (e *env) chunked(method, path, body string) reply {
	e.t.Helper()
	req := httptest.NewRequest(method, "http://gw"+path, io.NopCloser(strings.NewReader(body)))
	req.ContentLength, req.TransferEncoding = -1, []string{"chunked"}
	req.Header.Set("Authorization", "Bearer ops")
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	return reply{status: w.Code, header: w.Result().Header, body: w.Body.String()}
}

// Rule: an operator route that takes no request body (revoke an epoch,
// rotate the key, bump the policy, clear a binding) refuses one with
// INVALID_REQUEST and does nothing: rotate with {"epoch":1} rotated, and
// revoke with a body "garbage" answered 200. An empty body is no body.
func TestAnAdminRouteWithoutABodyRefusesOneAndChangesNothing(t *testing.T) {
	e, a := newAuthorityEnv(t, nil)
	e.srv.Bindings = &gateway.Bindings{Store: e.store, Leases: holders{}, Log: e.srv.Log}
	e.h = handlers.Router(e.srv) // with the binding routes
	c := e.grant(res7, ownerA, 1, nil)
	if r := e.put(tokA, c, "local/inv/7", 1, "v1"); r.status != http.StatusOK {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	bound := func() string {
		return e.do("GET", "/v1/admin/bindings/local/inv/7", "ops", nil, "").body
	}
	before, binding := adminSnap(t, a), bound()
	if !strings.Contains(binding, res7) {
		t.Fatalf("no binding to clear: %s", binding)
	}
	json := map[string]string{"Content-Type": "application/json"}
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/admin/keys/rotate", `{"epoch":1}`},
		{"POST", "/v1/admin/keys/rotate", `{}`},
		{"POST", "/v1/admin/epochs/1/revoke", "garbage"},
		{"POST", "/v1/admin/policy/bump", `{"generation":9}`},
		{"DELETE", "/v1/admin/bindings/local/inv/7", `{"resource":"local/inv/7"}`},
	} {
		wantProblem(t, e.do(tc.method, tc.path, "ops", json, tc.body), http.StatusBadRequest, "INVALID_REQUEST")
		if r := e.chunked(tc.method, tc.path, tc.body); r.status != http.StatusBadRequest || !strings.Contains(r.body, "INVALID_REQUEST") {
			t.Fatalf("%s %s chunked %q: %d %s", tc.method, tc.path, tc.body, r.status, r.body)
		}
		if after := adminSnap(t, a); after != before {
			t.Fatalf("%s %s with a body changed the operator state:\n%s\n->\n%s", tc.method, tc.path, before, after)
		}
		if after := bound(); after != binding {
			t.Fatalf("%s %s with a body changed the binding: %s -> %s", tc.method, tc.path, binding, after)
		}
	}
	if strings.Contains(e.logs.String(), `msg="admin action"`) || strings.Contains(e.logs.String(), "binding cleared") {
		t.Fatalf("a refused action was logged as done:\n%s", e.logs.String())
	}
	// Without a body, as the client and fencectl send them (nil body, or an
	// empty chunked one), each acts.
	if r := e.chunked("POST", "/v1/admin/policy/bump", ""); r.status != http.StatusOK || !strings.Contains(r.body, `"policyGeneration":2`) {
		t.Fatalf("bump, empty chunked body: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/admin/keys/rotate", "ops", json, ""); r.status != http.StatusOK || !strings.Contains(r.body, `"issuerEpoch":2`) {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/v1/admin/epochs/1/revoke", "ops", nil, ""); r.status != http.StatusOK || !strings.Contains(r.body, `"revokedEpochs":[1]`) {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if r := e.do("DELETE", "/v1/admin/bindings/local/inv/7", "ops", nil, ""); r.status != http.StatusOK {
		t.Fatalf("clear binding: %d %s", r.status, r.body)
	}
	wantProblem(t, e.do("GET", "/v1/admin/bindings/local/inv/7", "ops", nil, ""), http.StatusNotFound, "NOT_FOUND")
}
