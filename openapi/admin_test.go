package openapi_test

import (
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/proofs"
)

// TestAdminResponsesMatchTheSpec drives every operator route: success, no or
// an unknown credential (401), a workload credential (403), bad input (400),
// validating every answer against the spec.
func TestAdminResponsesMatchTheSpec(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/admin/state", ""},
		{"POST", "/v1/admin/epochs/7/revoke", ""},
		{"POST", "/v1/admin/keys/rotate", ""},
		{"POST", "/v1/admin/floor", `{"floor":100}`},
		{"PUT", "/v1/admin/modes", `{"pattern":"local/*","mode":"shadow","breakGlass":true}`},
		{"GET", "/v1/admin/modes", ""},
		{"POST", "/v1/admin/policy/bump", ""},
		{"GET", "/v1/admin/trust-bundle", ""},
		{"PUT", "/v1/admin/trust-bundle", `{"version":1,"keys":[]}`},
		{"GET", "/v1/admin/bindings/local/inv/7", ""},
		{"DELETE", "/v1/admin/bindings/local/inv/7", ""},
	}
	for _, r := range routes {
		_, p := e.call(r.method, r.path, "", json, r.body, 401)
		wantCode(t, p, fencegate.CodeUnauthenticated)
		_, p = e.call(r.method, r.path, "not-a-token", json, r.body, 401)
		wantCode(t, p, fencegate.CodeUnauthenticated)
		_, p = e.call(r.method, r.path, tokA, json, r.body, 403)
		wantCode(t, p, fencegate.CodeForbidden)
	}
	if e.admin.policy != 1 || len(e.admin.revoked) != 0 || e.admin.floor != 0 || e.admin.verifier.Bundle().Version() != 1 ||
		len(e.admin.modes.Rules()) != 0 {
		t.Fatal("a refused admin request changed the state")
	}

	_, p := e.call("GET", "/v1/admin/bindings/local/inv/7", tokAdmin, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	_, p = e.call("DELETE", "/v1/admin/bindings/local/inv/7", tokAdmin, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	_, p = e.call("GET", "/v1/admin/bindings/local/inv//7", tokAdmin, nil, "", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)

	_, st := e.call("GET", "/v1/admin/state", tokAdmin, nil, "", 200)
	if st["trustBundleVersion"] != float64(1) || st["issuerEpoch"] != float64(1) {
		t.Errorf("state %v", st)
	}
	_, st = e.call("POST", "/v1/admin/policy/bump", tokAdmin, nil, "", 200)
	if st["policyGeneration"] != float64(2) {
		t.Errorf("policy not bumped: %v", st)
	}
	_, st = e.call("POST", "/v1/admin/epochs/7/revoke", tokAdmin, nil, "", 200)
	if !slices.Equal(st["revokedEpochs"].([]any), []any{float64(7)}) {
		t.Errorf("epoch 7 not revoked: %v", st)
	}
	_, p = e.call("POST", "/v1/admin/epochs/0/revoke", tokAdmin, nil, "", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("POST", "/v1/admin/epochs/x/revoke", tokAdmin, nil, "", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("POST", "/v1/admin/epochs/07/revoke", tokAdmin, nil, "", 400) // not canonical
	wantCode(t, p, fencegate.CodeInvalidRequest)
	// The routes that take no body refuse one, as documented.
	for _, path := range []string{"/v1/admin/epochs/7/revoke", "/v1/admin/keys/rotate", "/v1/admin/policy/bump"} {
		_, p = e.call("POST", path, tokAdmin, json, `{"epoch":1}`, 400)
		wantCode(t, p, fencegate.CodeInvalidRequest)
	}
	if e.admin.policy != 2 || len(e.admin.revoked) != 1 {
		t.Fatalf("a refused admin request changed the state: policy %d, revoked %v", e.admin.policy, e.admin.revoked)
	}
	e.call("POST", "/v1/admin/floor", tokAdmin, json, `{"floor":100}`, 200)
	_, p = e.call("POST", "/v1/admin/floor", tokAdmin, json, `{"floor":-1}`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("POST", "/v1/admin/floor", tokAdmin, json, `{"floor":1,"extra":true}`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	// Enforcement modes: enforce is always allowed; shadow needs break-glass
	// unless the pattern is already shadow; bad patterns, modes and bodies
	// are refused.
	_, st = e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/prod/*","mode":"enforce"}`, 200)
	if m, _ := jsonMarshal(st["modes"]); m != `[{"mode":"enforce","pattern":"local/prod/*"}]` {
		t.Errorf("modes after enforce: %v", st["modes"])
	}
	_, p = e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/prod/*","mode":"shadow"}`, 403)
	wantCode(t, p, fencegate.CodeForbidden)
	_, p = e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/new/*","mode":"shadow","breakGlass":false}`, 403)
	wantCode(t, p, fencegate.CodeForbidden)
	_, st = e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/stage","mode":"shadow","breakGlass":true}`, 200)
	if len(st["modes"].([]any)) != 2 {
		t.Errorf("modes after break-glass: %v", st["modes"])
	}
	e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/stage","mode":"shadow"}`, 200) // already shadow
	for _, body := range []string{
		`{"pattern":"local/*","mode":"audit"}`,
		`{"pattern":"local/[","mode":"enforce"}`,
		`{"pattern":"","mode":"enforce"}`,
		`{"pattern":"local/*","mode":"enforce","extra":1}`,
		`{"pattern":"local/*"`,
	} {
		_, p = e.call("PUT", "/v1/admin/modes", tokAdmin, json, body, 400)
		wantCode(t, p, fencegate.CodeInvalidRequest)
	}
	// The modes a page at a time, by pattern.
	_, pg := e.call("GET", "/v1/admin/modes?limit=1", tokAdmin, nil, "", 200)
	next, _ := pg["next"].(string)
	if m, _ := jsonMarshal(pg["modes"]); m != `[{"mode":"enforce","pattern":"local/prod/*"}]` || next == "" {
		t.Errorf("first page of modes: %v", pg)
	}
	_, pg = e.call("GET", "/v1/admin/modes?limit=1&cursor="+next, tokAdmin, nil, "", 200)
	if m, _ := jsonMarshal(pg["modes"]); m != `[{"mode":"shadow","pattern":"local/stage"}]` || pg["next"] != nil {
		t.Errorf("second page of modes: %v", pg)
	}
	for _, bad := range []string{"?limit=0", "?limit=1001", "?cursor=nope!"} {
		_, p = e.call("GET", "/v1/admin/modes"+bad, tokAdmin, nil, "", 400)
		wantCode(t, p, fencegate.CodeInvalidRequest)
	}
	if got := e.admin.modes.Rules(); len(got) != 2 || e.admin.modes.For("local/prod/x") != gateway.Enforce ||
		e.admin.modes.For("local/stage/x") != gateway.Shadow {
		t.Errorf("modes after refused puts: %v", got)
	}
	_, st = e.call("POST", "/v1/admin/keys/rotate", tokAdmin, nil, "", 200)
	if st["issuerEpoch"] != float64(2) || st["trustBundleVersion"] != float64(2) || len(st["keyIds"].([]any)) != 2 {
		t.Errorf("rotation: %v", st)
	}

	// The trust bundle: read it, put it back one version up, refuse a lower
	// version, a bundle without the registry's key, and junk.
	_, bundle := e.call("GET", "/v1/admin/trust-bundle", tokAdmin, nil, "", 200)
	if bundle["version"] != float64(2) || len(bundle["keys"].([]any)) != 2 {
		t.Fatalf("bundle %v", bundle)
	}
	withVersion := func(v int) string {
		b := map[string]any{"version": v, "keys": bundle["keys"]}
		out, err := jsonMarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	_, st = e.call("PUT", "/v1/admin/trust-bundle", tokAdmin, json, withVersion(3), 200)
	if st["trustBundleVersion"] != float64(3) {
		t.Errorf("bundle not installed: %v", st)
	}
	_, p = e.call("PUT", "/v1/admin/trust-bundle", tokAdmin, json, withVersion(1), 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	other, err := proofs.GenerateEd25519Signer("other-key")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := proofs.NewBundle(9, other.BundleKey(9))
	if err != nil {
		t.Fatal(err)
	}
	data, err := foreign.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	_, p = e.call("PUT", "/v1/admin/trust-bundle", tokAdmin, json, string(data), 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("PUT", "/v1/admin/trust-bundle", tokAdmin, json, `{"version":4`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	if v := e.admin.verifier.Bundle().Version(); v != 3 {
		t.Errorf("bundle version %d after refused puts, want 3", v)
	}
}

// TestAdminWithoutRegistryOrOperators covers the other configurations: no
// in-process registry (rotate and floor are UNSUPPORTED), no operator
// credentials (every operator route is FORBIDDEN), and a panicking admin
// (500 INTERNAL from the recoverer).
func TestAdminWithoutRegistryOrOperators(t *testing.T) {
	json := map[string]string{"Content-Type": "application/json"}
	e := newEnv(t, func(_ *handlers.Server, a *fakeAdmin) { a.regKID = "" })
	_, p := e.call("POST", "/v1/admin/keys/rotate", tokAdmin, nil, "", 501)
	wantCode(t, p, fencegate.CodeUnsupported)
	_, p = e.call("POST", "/v1/admin/floor", tokAdmin, json, `{"floor":5}`, 501)
	wantCode(t, p, fencegate.CodeUnsupported)
	_, st := e.call("GET", "/v1/admin/state", tokAdmin, nil, "", 200)
	if _, ok := st["issuerEpoch"]; ok {
		t.Errorf("issuerEpoch without a registry: %v", st)
	}
	e.call("POST", "/v1/admin/epochs/1/revoke", tokAdmin, nil, "", 200)

	e = newEnv(t, func(s *handlers.Server, _ *fakeAdmin) { s.AdminAuth = nil })
	for _, tok := range []string{tokAdmin, tokA, ""} {
		_, p = e.call("GET", "/v1/admin/state", tok, nil, "", 403)
		wantCode(t, p, fencegate.CodeForbidden)
		_, p = e.call("POST", "/v1/unknown/rcpt_nope/resolve", tok, json, `{"state":"COMMITTED"}`, 403)
		wantCode(t, p, fencegate.CodeForbidden)
	}

	e = newEnv(t, func(_ *handlers.Server, a *fakeAdmin) { a.panics = true })
	_, p = e.call("GET", "/v1/admin/state", tokAdmin, nil, "", 500)
	wantCode(t, p, fencegate.CodeInternal)
}

// TestUnroutedAdminPathIsNotFound: a path under /v1/admin that no route
// matches is 404 NOT_FOUND whatever the credential, as elsewhere under /v1,
// not a 401 or 403 about the credential.
func TestUnroutedAdminPathIsNotFound(t *testing.T) {
	e := newEnv(t)
	for _, tok := range []string{"", tokA, tokAdmin} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/admin/nope", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		e.h.ServeHTTP(rec, req)
		var p map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		if rec.Code != 404 || p["code"] != string(fencegate.CodeNotFound) {
			t.Errorf("GET /v1/admin/nope with %q: %d %s", tok, rec.Code, rec.Body)
		}
	}
}

// TestEveryAdminRouteInTheSpecRefusesWorkloads: every operation the spec
// lists under /v1/admin (path parameters filled in) is 401 without a
// credential and 403 FORBIDDEN for a workload, so a route added without the
// operator guard (adminOnly is attached per route) fails here, not in use.
func TestEveryAdminRouteInTheSpecRefusesWorkloads(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}
	n := 0
	for tmpl, item := range e.doc.Paths.Map() {
		if !strings.HasPrefix(tmpl, "/v1/admin/") {
			continue
		}
		path := regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(tmpl, "x")
		for method := range item.Operations() {
			n++
			_, p := e.call(method, path, "", json, "{}", 401)
			wantCode(t, p, fencegate.CodeUnauthenticated)
			_, p = e.call(method, path, tokA, json, "{}", 403)
			wantCode(t, p, fencegate.CodeForbidden)
		}
	}
	if n < 10 {
		t.Fatalf("only %d admin operations found in the spec", n)
	}
	if e.admin.policy != 1 || len(e.admin.revoked) != 0 || e.admin.floor != 0 || len(e.admin.modes.Rules()) != 0 {
		t.Fatal("a refused admin request changed the state")
	}
}
