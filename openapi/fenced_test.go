package openapi_test

import (
	"reflect"
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

// TestReceiptSchemaDocumentsEveryReceiptField: the Receipt schema has a
// property for every member of a receipt's JSON (fencegate.Receipt) and
// none it lacks, so a field a receipt gains (who made a delegated write,
// for one) is documented where clients look; the delegate's and the
// delegation's say what they mean.
func TestReceiptSchemaDocumentsEveryReceiptField(t *testing.T) {
	schemaDocumentsEveryField(t, "Receipt", fencegate.Receipt{})
}

// TestQuarantineSchemaDocumentsEveryRecordField: the Quarantine schema has
// a property for every member of a quarantine record's JSON
// (fencegate.Quarantine) and none it lacks; the delegate's and the
// delegation's (who sent a refused delegated write) say what they mean.
func TestQuarantineSchemaDocumentsEveryRecordField(t *testing.T) {
	schemaDocumentsEveryField(t, "Quarantine", fencegate.Quarantine{})
}

// schemaDocumentsEveryField checks that the component schema has a property
// for every member of v's JSON and none v lacks, and that its delegate and
// delegationId describe a delegation.
func schemaDocumentsEveryField(t *testing.T, schema string, v any) {
	t.Helper()
	doc := loadDoc(t)
	props := doc.Components.Schemas[schema].Value.Properties
	var fields []string
	rt := reflect.TypeOf(v)
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" {
			t.Fatalf("%s field %s has no JSON name", rt.Name(), rt.Field(i).Name)
		}
		fields = append(fields, name)
		if props[name] == nil {
			t.Errorf("the %s schema does not document %q", schema, name)
		}
	}
	for name := range props {
		if !slices.Contains(fields, name) {
			t.Errorf("the %s schema documents %q, which a %s does not have", schema, name, rt.Name())
		}
	}
	for _, name := range []string{"delegate", "delegationId"} {
		if p := props[name]; p == nil || p.Value == nil || !strings.Contains(p.Value.Description, "delegat") {
			t.Errorf("the %s schema's %q does not say what it is", schema, name)
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
