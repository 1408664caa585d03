package handlers_test

import (
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/registry/embedded"
)

// nonCanonical are decimals another reader may take otherwise: leading
// zeros, a sign, spaces, another base, a fraction, a width past uint64.
var nonCanonical = []string{"01", "001", "+1", "-1", "%201", "1%20", "0x1", "1_0", "1.0", "1e0", "18446744073709551616", ""}

// Rule: a number in an admin path or query is one canonical decimal (ASCII
// digits, no sign, no leading zero): POST /v1/admin/epochs/01/revoke is
// INVALID_REQUEST and revokes nothing, where it revoked epoch 1.
func TestANonCanonicalEpochIsRefusedAndRevokesNothing(t *testing.T) {
	e, a := newAuthorityEnv(t, nil)
	before := adminSnap(t, a)
	for _, n := range nonCanonical {
		if n == "" {
			continue // no route: /epochs//revoke
		}
		r := e.do("POST", "/v1/admin/epochs/"+n+"/revoke", "ops", nil, "")
		wantProblem(t, r, http.StatusBadRequest, "INVALID_REQUEST")
		if after := adminSnap(t, a); after != before {
			t.Fatalf("epoch %q changed the operator state:\n%s\n->\n%s", n, before, after)
		}
	}
	r := e.do("POST", "/v1/admin/epochs/1/revoke", "ops", nil, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"revokedEpochs":[1]`) {
		t.Fatalf("epoch 1: %d %s", r.status, r.body)
	}
}

// Rule: every list's limit, the trust-bundle chain's after and a receipt
// query's fence and segment are canonical decimals too, read by the same
// reader: anything else is INVALID_REQUEST.
func TestNonCanonicalQueryNumbersAreRefused(t *testing.T) {
	e, _ := newAuthorityEnv(t, func(s *handlers.Server) {
		s.GatewayAuth = handlers.NewBearerTokens(map[string]string{"gw-token": "replica"})
		b, err := embedded.Open(filepath.Join(t.TempDir(), "registry.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		// The registry mounts the chain route (GET /v1/trust-bundle/chain).
		if s.Registry, err = registry.New(registry.Config{Backend: b, Authority: s.Admin.(*authority.Authority)}); err != nil {
			t.Fatal(err)
		}
	})
	c := e.grant(res7, ownerA, 1, nil)
	if r := e.put(tokA, c, "local/inv/7", 1, "v1"); r.status != http.StatusOK {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	cookie := e.login()
	for _, n := range nonCanonical {
		q := url.QueryEscape(n)
		if strings.HasPrefix(n, "%") || strings.HasSuffix(n, "%20") {
			q = n // already escaped
		}
		wantProblem(t, e.do("GET", "/v1/admin/modes?limit="+q, "ops", nil, ""), http.StatusBadRequest, "INVALID_REQUEST")
		wantProblem(t, e.do("GET", "/v1/receipts?resource="+res7+"&fence="+q+"&segment=1", tokA, nil, ""), http.StatusBadRequest, "INVALID_REQUEST")
		wantProblem(t, e.do("GET", "/v1/receipts?resource="+res7+"&fence=1&segment="+q, tokA, nil, ""), http.StatusBadRequest, "INVALID_REQUEST")
		wantProblem(t, e.do("GET", "/v1/trust-bundle/chain?after="+q, "gw-token", nil, ""), http.StatusBadRequest, "INVALID_REQUEST")
		if resp, body := e.page("GET", "/console/segment?resource="+res7+"&fence="+q+"&segment=1", map[string]string{"Cookie": cookie}, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "INVALID_REQUEST") {
			t.Fatalf("console segment fence %q: %d\n%s", n, resp.StatusCode, body)
		}
	}
	// A number given twice is no number either.
	if resp, body := e.page("GET", "/console/segment?resource="+res7+"&fence=1&fence=2&segment=1", map[string]string{"Cookie": cookie}, nil); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "INVALID_REQUEST") {
		t.Fatalf("console segment with fence twice: %d\n%s", resp.StatusCode, body)
	}
	// The canonical forms are read.
	if r := e.do("GET", "/v1/admin/modes?limit=5", "ops", nil, ""); r.status != http.StatusOK {
		t.Fatalf("limit=5: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/v1/receipts?resource="+res7+"&fence=1&segment=1", tokA, nil, ""); r.status != http.StatusOK || strings.Contains(r.body, `"receipts":[]`) {
		t.Fatalf("fence=1&segment=1: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/v1/trust-bundle/chain?after=1", "gw-token", nil, ""); r.status != http.StatusOK {
		t.Fatalf("after=1: %d %s", r.status, r.body)
	}
	if resp, _ := e.page("GET", "/console/segment?resource="+res7+"&fence=1&segment=1", map[string]string{"Cookie": cookie}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("console segment 1/1: %d", resp.StatusCode)
	}
}
