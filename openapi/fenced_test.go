package openapi_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/handlers"
)

// TestEveryFencedOperationTakesADelegation: every operation that takes a
// Fence-Grant documents Fence-Delegation too, which the server honours on
// every fenced request (a delegate writes under the owner's grant).
func TestEveryFencedOperationTakesADelegation(t *testing.T) {
	doc := loadDoc(t)
	for _, op := range specOperations(doc) {
		method, path, _ := strings.Cut(op, " ")
		o := doc.Paths.Value(path).GetOperation(method)
		var names []string
		for _, p := range o.Parameters {
			if p.Value != nil && p.Value.In == "header" {
				names = append(names, p.Value.Name)
			}
		}
		if slices.Contains(names, "Fence-Grant") && !slices.Contains(names, "Fence-Delegation") {
			t.Errorf("%s takes Fence-Grant but does not document Fence-Delegation", op)
		}
	}
}

// TestRegistryLessReplicaAnswersNotFoundOnLeaseRoutes: a gateway without an
// in-process registry routes none of the registry's routes; each answers
// 404 NOT_FOUND, which the spec documents for each.
func TestRegistryLessReplicaAnswersNotFoundOnLeaseRoutes(t *testing.T) {
	e := newEnv(t, func(s *handlers.Server, _ *fakeAdmin) { s.Registry = nil })
	json := map[string]string{"Content-Type": "application/json"}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/v1/leases", `{"resource":"local/inv/7","requestId":"r","ttlMs":30000,"operationId":"o"}`},
		{"GET", "/v1/leases/lease_1", ""},
		{"POST", "/v1/leases/lease_1/renew", `{"ttlMs":30000}`},
		{"DELETE", "/v1/leases/lease_1", ""},
		{"POST", "/v1/leases/lease_1/attest", `{"grantDigest":"sha256:00","resource":"local/inv/7","owner":"o","fenceToken":1,"issuerEpoch":1}`},
		{"POST", "/v1/leases/lease_1/delegations", `{"delegate":"d"}`},
		{"DELETE", "/v1/delegations/dlg_1", ""},
		{"POST", "/v1/delegations/dlg_1/status", `{"grantDigest":"sha256:00"}`},
		{"POST", "/v1/leases/lease_1/s3-resolve", ""},
		{"GET", "/v1/trust-bundle", ""},
	} {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			e := *e
			e.t = t
			_, p := e.call(r.method, r.path, tokA, json, r.body, 404)
			wantCode(t, p, fencegate.CodeNotFound)
		})
	}
}
