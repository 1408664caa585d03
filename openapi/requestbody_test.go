package openapi_test

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
)

// TestEveryRequiredMemberIsRequired: for each operation with a JSON body,
// the spec's example less any one member of the schema's required list is
// refused INVALID_REQUEST (DESIGN §3: every bad input gets a clear error),
// and nothing those bodies name has changed: no lease was acquired, the
// operator state is as it was.
func TestEveryRequiredMemberIsRequired(t *testing.T) {
	e := newEnv(t)
	hdr := map[string]string{"Content-Type": "application/json"}
	param := regexp.MustCompile(`\{[^}]+\}`)
	checked := 0
	for _, op := range specOperations(e.doc) {
		method, path, _ := strings.Cut(op, " ")
		o := e.doc.Paths.Value(path).GetOperation(method)
		if o.RequestBody == nil {
			continue
		}
		mt := o.RequestBody.Value.Content.Get("application/json")
		if mt == nil || mt.Schema == nil {
			continue // no body, or bytes forwarded as they are (an API's routes)
		}
		example, ok := mt.Example.(map[string]any)
		if !ok {
			t.Errorf("%s: no example object", op)
			continue
		}
		tok := tokA
		if o.Security != nil && len(*o.Security) == 1 && (*o.Security)[0]["admin"] != nil {
			tok = tokAdmin
		}
		url := param.ReplaceAllString(path, "nope")
		for _, name := range mt.Schema.Value.Required {
			body := map[string]any{}
			for k, v := range example {
				if k != name {
					body[k] = v
				}
			}
			data, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			t.Run(method+" "+path+" without "+name, func(t *testing.T) {
				e := *e
				e.t = t
				_, p := e.call(method, url, tok, hdr, string(data), 400)
				wantCode(t, p, fencegate.CodeInvalidRequest)
				if d, _ := p["detail"].(string); !strings.Contains(d, `"`+name+`" is required`) {
					t.Errorf("detail %q does not name %q", d, name)
				}
			})
			checked++
		}
	}
	if checked < 10 {
		t.Errorf("only %d required members checked", checked)
	}
	e.wantNothingChanged()
}

// TestLooseJSONBodiesAreRefused: null for a required member, trailing
// data, a duplicate member and member names that match only
// case-insensitively are INVALID_REQUEST on the routes, and change nothing.
func TestLooseJSONBodiesAreRefused(t *testing.T) {
	e := newEnv(t)
	hdr := map[string]string{"Content-Type": "application/json"}
	for _, c := range []struct{ method, path, tok, body string }{
		{"POST", "/v1/admin/floor", tokAdmin, `{}`},
		{"POST", "/v1/admin/floor", tokAdmin, `{"floor":null}`},
		{"POST", "/v1/admin/floor", tokAdmin, `{"floor":5}}`},
		{"POST", "/v1/admin/floor", tokAdmin, `{"floor":5,"floor":6}`},
		{"POST", "/v1/admin/floor", tokAdmin, `{"Floor":5}`},
		{"PUT", "/v1/admin/modes", tokAdmin, `{"pattern":"local/*","mode":"enforce"}]x`},
		{"POST", "/v1/leases", tokA, `{"resource":"local/inv/7","requestId":"r","ttlMs":30000,"operationId":"o"}}`},
		{"POST", "/v1/leases", tokA, `{"resource":"local/inv/7","resource":"local/inv/8","requestId":"r","ttlMs":30000,"operationId":"o"}`},
		{"POST", "/v1/leases", tokA, `{"Resource":"local/inv/7","REQUESTID":"r","ttlms":30000,"operationid":"o"}`},
		{"POST", "/v1/leases/nope/attest", tokA, `{"grantDigest":"sha256:00"}}`},
		{"POST", "/v1/leases/nope/attest", tokA, `{"resource":"local/inv/7"}`},
	} {
		_, p := e.call(c.method, c.path, c.tok, hdr, c.body, 400)
		wantCode(t, p, fencegate.CodeInvalidRequest)
	}
	e.wantNothingChanged()
}

// TestLooseQueriesAreRefused: a list's query (and a lease status's) is
// parsed strictly. One that does not parse (a bad escape, a `;`), a
// parameter given twice, and a resource that is not a canonical name are
// each INVALID_REQUEST as problem+json, never read in part (the default page,
// the first value, an empty list), and change nothing.
func TestLooseQueriesAreRefused(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}
	_, lease := e.call("POST", "/v1/leases", tokA, json, `{"resource":"local/inv/9","requestId":"r9","ttlMs":30000,"operationId":"op"}`, 201)
	id := lease["lease"].(string)
	for _, c := range []struct{ path, tok string }{
		{"/v1/unknown?limit=5000;x", tokA},
		{"/v1/unknown?limit=%zz", tokA},
		{"/v1/unknown?limit=1000&limit=%zz", tokA},
		{"/v1/unknown?limit=5&limit=5", tokA}, // refused before strictQuery too
		{"/v1/unknown?cursor=&cursor=", tokA},
		{"/v1/quarantine?limit=0;", tokA},
		{"/v1/quarantine?resource=local/inv/7&resource=local/inv/8", tokA},
		{"/v1/quarantine?resource=LOCAL/../x", tokA},
		{"/v1/quarantine?resource=local/../x", tokA},
		{"/v1/receipts?operationId=o&limit=99999;", tokA},
		{"/v1/receipts?operationId=o&operationId=p", tokA},
		{"/v1/receipts?operationId=o&cursor=&cursor=", tokA},
		{"/v1/receipts?resource=local/inv/7&resource=local/inv/8", tokA},
		{"/v1/receipts?resource=local/inv/7&fence=1&segment=1&segment=2", tokA},
		{"/v1/receipts?resource=local/inv/7&fence=1&fence=1&segment=1", tokA},
		{"/v1/receipts?resource=LOCAL/../x", tokA}, // refused before too: the other forms now match it
		{"/v1/receipts?resource=local/../x&fence=1&segment=1", tokA},
		{"/v1/admin/modes?limit=%", tokAdmin},
		{"/v1/admin/modes?cursor=&cursor=", tokAdmin},
		{"/v1/leases/" + id + "?s3Credentials=true&s3Credentials=false", tokA},
		{"/v1/leases/" + id + "?s3Credentials=%zz", tokA},
	} {
		h, p := e.call("GET", c.path, c.tok, nil, "", 400)
		if h.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s: Content-Type %q", c.path, h.Get("Content-Type"))
		}
		if got, _ := p["code"].(string); got != string(fencegate.CodeInvalidRequest) {
			t.Errorf("GET %s: code %q, want INVALID_REQUEST", c.path, got)
		}
	}
	if _, l := e.call("GET", "/v1/leases/"+id, tokA, nil, "", 200); l["expiresAt"] != lease["expiresAt"] || l["state"] != "HELD" {
		t.Errorf("lease after refused reads: %v, was %v", l, lease)
	}
	e.wantNothingChanged()
}

// wantNothingChanged checks that the operator state is the initial one and
// that local/inv/7 and local/inv/8 are free: another owner acquires each
// at fence 1.
func (e *testEnv) wantNothingChanged() {
	e.t.Helper()
	a := e.admin
	if a.floor != 0 || a.policy != 1 || len(a.revoked) != 0 || a.verifier.Bundle().Version() != 1 || len(a.modes.Rules()) != 0 {
		e.t.Errorf("a refused request changed the operator state: floor %d policy %d revoked %v bundle %d modes %v",
			a.floor, a.policy, a.revoked, a.verifier.Bundle().Version(), a.modes.Rules())
	}
	hdr := map[string]string{"Content-Type": "application/json"}
	for _, res := range []string{"local/inv/7", "local/inv/8"} {
		_, l := e.call("POST", "/v1/leases", tokB, hdr, `{"resource":"`+res+`","requestId":"check-`+res+`","ttlMs":30000,"operationId":"o"}`, 201)
		if l["fenceToken"] != float64(1) || !slices.Contains([]any{"HELD"}, l["state"]) {
			e.t.Errorf("%s after refused requests: %v", res, l)
		}
	}
}
