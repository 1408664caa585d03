package openapi_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/openapi"
)

// TestRealResponsesMatchTheSpec drives the router through a lease, fenced
// writes, reads and rejections, validating every answer against the spec.
func TestRealResponsesMatchTheSpec(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}

	e.call("GET", "/healthz", "", nil, "", 200)
	if h, _ := e.call("GET", "/openapi.yaml", "", nil, "", 200); h.Get("Content-Type") != openapi.MediaType {
		t.Errorf("/openapi.yaml served as %q", h.Get("Content-Type"))
	}
	_, p := e.call("GET", "/v1/receipts?operationId=op-1", "", nil, "", 401)
	wantCode(t, p, fencegate.CodeUnauthenticated)
	_, p = e.call("GET", "/v1/receipts/rcpt_nope", tokA, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	_, p = e.call("GET", "/v1/resources/local/inv/7", tokA, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	_, p = e.call("GET", "/v1/receipts?resource=local/inv/7&fence=1", tokA, nil, "", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)

	// Lease, then fenced writes under it.
	_, lease := e.call("POST", "/v1/leases", tokA, json,
		`{"resource":"local/inv/7","requestId":"req-1","ttlMs":30000,"operationId":"op-1","operationCategory":"write"}`, 201)
	grant, _ := lease["grant"].(string)
	status, _ := lease["statusProof"].(string)
	leaseID, _ := lease["lease"].(string)
	_, p = e.call("POST", "/v1/leases", tokB, json,
		`{"resource":"local/inv/7","requestId":"req-b","ttlMs":30000,"operationId":"op-1"}`, 409)
	wantCode(t, p, fencegate.CodeLeaseHeld)
	_, p = e.call("POST", "/v1/leases", tokA, json, `{"resource":"local/../x","requestId":"r","ttlMs":1000,"operationId":"o"}`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	// Long-poll: the wait ends before the holder releases (LEASE_HELD); a
	// negative wait is refused.
	_, p = e.call("POST", "/v1/leases", tokB, json,
		`{"resource":"local/inv/7","requestId":"req-b","ttlMs":30000,"operationId":"op-1","waitMs":30}`, 409)
	wantCode(t, p, fencegate.CodeLeaseHeld)
	_, p = e.call("POST", "/v1/leases", tokB, json,
		`{"resource":"local/inv/7","requestId":"req-b","ttlMs":30000,"operationId":"op-1","waitMs":-1}`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)

	h, rc := e.call("PUT", "/v1/objects/local/inv/7/part-1", tokA, fenced(grant, status, 1), "hello", 200)
	if h.Get("Fence-Receipt") == "" || rc["receiptId"] != h.Get("Fence-Receipt") {
		t.Errorf("Fence-Receipt %q does not name the receipt %v", h.Get("Fence-Receipt"), rc["receiptId"])
	}
	h, _ = e.call("PUT", "/v1/objects/local/inv/7/part-1", tokA, fenced(grant, status, 1), "hello", 200)
	if h.Get("Fence-Replay") != "true" {
		t.Errorf("replay without Fence-Replay: true")
	}
	h, p = e.call("PUT", "/v1/objects/local/inv/7/part-1", tokA, fenced(grant, status, 1), "other", 409)
	wantCode(t, p, fencegate.CodeQuarantined)
	if h.Get("Fence-Receipt") == "" || h.Get("Fence-Receipt") != p["receiptId"] {
		t.Errorf("QUARANTINED: Fence-Receipt %q does not name the receipt %v", h.Get("Fence-Receipt"), p["receiptId"])
	}
	_, p = e.call("PUT", "/v1/objects/local/inv/7/part-1", tokA, fenced(grant, status, 3), "x", 409)
	wantCode(t, p, fencegate.CodeSegmentOutOfOrder)
	_, p = e.call("PUT", "/v1/objects/local/inv/70", tokA, fenced(grant, status, 2), "x", 403)
	wantCode(t, p, fencegate.CodeResourceMismatch)
	_, p = e.call("PUT", "/v1/objects/local/inv/7/x", tokB, fenced(grant, status, 2), "x", 403)
	wantCode(t, p, fencegate.CodeOwnerMismatch)
	_, p = e.call("PUT", "/v1/objects/local/inv/7/x", tokA, fenced("a.b.c", status, 2), "x", 401)
	wantCode(t, p, fencegate.CodeGrantInvalid)
	_, p = e.call("PUT", "/v1/objects/local/inv/7/x", tokA, map[string]string{"Fence-Grant": grant}, "x", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("PUT", "/v1/objects/local/inv/7/../8", tokA, fenced(grant, status, 2), "x", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("PUT", "/v1/objects/local/inv%2F7", tokA, fenced(grant, status, 2), "x", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("PUT", "/v1/objects/nostore/inv/7", tokA, fenced(grant, status, 2), "x", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	e.call("DELETE", "/v1/objects/local/inv/7/part-2", tokA, fenced(grant, status, 2), "", 200)
	// The ?key= form generated clients use: the escaped slashes are decoded once.
	e.call("PUT", "/v1/objects/local?key=inv%2F7%2Fpart-q", tokA, fenced(grant, status, 3), "q", 200)
	_, p = e.call("PUT", "/v1/objects/local?key=inv%2F7%2F..%2F8", tokA, fenced(grant, status, 4), "x", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	e.call("GET", "/v1/objects/local?key=inv%2F7%2Fpart-q", tokA, nil, "", 200)
	e.call("HEAD", "/v1/objects/local?key=inv/7/part-q", tokA, nil, "", 200)

	// Reads.
	h, _ = e.call("GET", "/v1/objects/local/inv/7/part-1", tokA, nil, "", 200)
	if h.Get("ETag") == "" || h.Get("Fence-Token") == "" || h.Get("Fence-Receipt") != rc["receiptId"] {
		t.Errorf("read lacks fence headers: %v", h)
	}
	e.call("HEAD", "/v1/objects/local/inv/7/part-1", tokA, nil, "", 200)
	_, p = e.call("GET", "/v1/objects/local/inv/7/none", tokA, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	e.call("GET", "/v1/receipts?operationId=op-1", tokA, nil, "", 200)
	// Pages: op-1 has more than one receipt (part-1, part-2, its delete).
	_, pg := e.call("GET", "/v1/receipts?operationId=op-1&limit=1", tokA, nil, "", 200)
	next, _ := pg["next"].(string)
	if rs, _ := pg["receipts"].([]any); len(rs) != 1 || next == "" {
		t.Fatalf("a page of 1: %v", pg)
	}
	e.call("GET", "/v1/receipts?operationId=op-1&limit=1&cursor="+next, tokA, nil, "", 200)
	e.call("GET", "/v1/receipts?resource=local/inv/7&limit=1000", tokA, nil, "", 200)
	e.call("GET", "/v1/unknown?limit=5", tokA, nil, "", 200)
	for _, bad := range []string{"/v1/receipts?operationId=op-1&limit=0", "/v1/receipts?operationId=op-1&limit=1001",
		"/v1/receipts?operationId=op-1&limit=x", "/v1/receipts?operationId=op-2&cursor=" + next,
		"/v1/receipts?resource=local/inv/7&cursor=" + next, "/v1/unknown?cursor=nope"} {
		_, p = e.call("GET", bad, tokA, nil, "", 400)
		wantCode(t, p, fencegate.CodeInvalidRequest)
	}
	fence := strconv.FormatFloat(rc["fenceToken"].(float64), 'f', 0, 64)
	e.call("GET", "/v1/receipts?resource=local/inv/7&fence="+fence+"&segment=1", tokA, nil, "", 200)
	e.call("GET", "/v1/receipts/"+h.Get("Fence-Receipt"), tokA, nil, "", 200)
	e.call("GET", "/v1/resources/local/inv/7", tokA, nil, "", 200)
	e.call("GET", "/v1/quarantine", tokA, nil, "", 200)
	_, ql := e.call("GET", "/v1/quarantine?resource=local/inv/7&limit=10", tokA, nil, "", 200)
	if recs, _ := ql["quarantine"].([]any); len(recs) == 1 {
		id, _ := recs[0].(map[string]any)["quarantineId"].(string)
		e.call("GET", "/v1/quarantine/"+id, tokA, nil, "", 200)
	} else {
		t.Errorf("quarantine list = %v, want the one record", ql)
	}
	_, p = e.call("GET", "/v1/quarantine/q_nope", tokA, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	_, p = e.call("GET", "/v1/quarantine?limit=0", tokA, nil, "", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	e.call("GET", "/v1/unknown", tokA, nil, "", 200)

	// Lease lifecycle.
	e.call("GET", "/v1/leases/"+leaseID, tokA, nil, "", 200)
	_, p = e.call("GET", "/v1/leases/lease_nope", tokA, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	e.call("POST", "/v1/leases/"+leaseID+"/renew", tokA, json, `{"ttlMs":30000}`, 200)
	_, p = e.call("POST", "/v1/leases/"+leaseID+"/renew", tokA, json, `{"ttlMs":30000,"extra":1}`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("POST", "/v1/leases/"+leaseID+"/renew", tokB, json, `{"ttlMs":30000}`, 403)
	wantCode(t, p, fencegate.CodeOwnerMismatch)
	_, p = e.call("DELETE", "/v1/leases/"+leaseID, tokB, nil, "", 403)
	wantCode(t, p, fencegate.CodeOwnerMismatch)
	e.call("DELETE", "/v1/leases/"+leaseID, tokA, nil, "", 200)
	e.call("DELETE", "/v1/leases/"+leaseID, tokA, nil, "", 200)
	_, p = e.call("POST", "/v1/leases/"+leaseID+"/renew", tokA, json, `{"ttlMs":30000}`, 409)
	wantCode(t, p, fencegate.CodeLeaseNotHeld)

	// A fenced call to a fronted API: the upstream's answer, then its replay.
	_, lease = e.call("POST", "/v1/leases", tokA, json,
		`{"resource":"payouts/acct-1","requestId":"req-p","ttlMs":30000,"operationId":"pay-1"}`, 201)
	grant, _ = lease["grant"].(string)
	status, _ = lease["statusProof"].(string)
	call := fenced(grant, status, 1)
	call["Content-Type"] = "application/json"
	h, _ = e.call("POST", "/v1/apis/payouts/v1/accounts/acct-1/payouts", tokA, call, `{"amount":100}`, 201)
	if h.Get("Fence-Receipt") == "" {
		t.Error("API answer without Fence-Receipt")
	}
	h, _ = e.call("POST", "/v1/apis/payouts/v1/accounts/acct-1/payouts", tokA, call, `{"amount":100}`, 201)
	if h.Get("Fence-Replay") != "true" {
		t.Error("API replay without Fence-Replay: true")
	}
	// The ?path= form generated clients use: the same call, so a replay.
	if qh, _ := e.call("POST", "/v1/apis/payouts?path=%2Fv1%2Faccounts%2Facct-1%2Fpayouts", tokA, call, `{"amount":100}`, 201); qh.Get("Fence-Replay") != "true" {
		t.Error("the ?path= form of the same segment is not its replay")
	}
	e.call("GET", "/v1/apis/payouts?path=%2Fv1%2Fpayouts%2Fpo_1&expand=x", tokB, nil, "", 200)
	_, p = e.call("POST", "/v1/apis/payouts/v1/accounts/acct-2/payouts", tokA, fenced(grant, status, 2), `{}`, 403)
	wantCode(t, p, fencegate.CodeResourceMismatch)
	_, p = e.call("PUT", "/v1/apis/payouts/v1/accounts/acct-1/payouts", tokA, fenced(grant, status, 2), `{}`, 404)
	wantCode(t, p, fencegate.CodeNotFound)
	_, p = e.call("POST", "/v1/apis/nope/v1/x", tokA, fenced(grant, status, 2), `{}`, 404)
	wantCode(t, p, fencegate.CodeNotFound)
	// A read of a declared read route: no grant, no receipt.
	if rh, _ := e.call("GET", "/v1/apis/payouts/v1/payouts/po_1?expand=x", tokB, nil, "", 200); rh.Get("Fence-Receipt") != "" {
		t.Error("a read answered with a receipt")
	}
	_, p = e.call("GET", "/v1/apis/payouts/v1/payouts/po_1", "", nil, "", 401)
	wantCode(t, p, fencegate.CodeUnauthenticated)
	_, p = e.call("GET", "/v1/apis/payouts/v1/accounts/acct-1/payouts", tokA, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	_, p = e.call("GET", "/v1/apis/payouts/v1/payouts/po_1", tokA, nil, "{}", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("POST", "/v1/unknown/"+h.Get("Fence-Receipt")+"/resolve", tokA, json, `{"state":"NOT_APPLIED"}`, 403)
	wantCode(t, p, fencegate.CodeForbidden)
	_, p = e.call("POST", "/v1/unknown/"+h.Get("Fence-Receipt")+"/resolve", "", json, `{"state":"NOT_APPLIED"}`, 401)
	wantCode(t, p, fencegate.CodeUnauthenticated)
	// A COMMITTED receipt keeps its final state.
	_, p = e.call("POST", "/v1/unknown/"+h.Get("Fence-Receipt")+"/resolve", tokAdmin, json, `{"state":"NOT_APPLIED"}`, 409)
	wantCode(t, p, fencegate.CodeReceiptSettled)
	_, p = e.call("POST", "/v1/unknown/rcpt_nope/resolve", tokAdmin, json, `{"state":"COMMITTED","note":"checked"}`, 404)
	wantCode(t, p, fencegate.CodeNotFound)
}

// TestResponseValidationCatchesMismatches makes sure the validation above is
// not vacuous: answers the spec does not allow are refused.
func TestResponseValidationCatchesMismatches(t *testing.T) {
	e := newEnv(t)
	bad := []struct {
		name, method, path string
		status             int
		ct, body           string
	}{
		{"code not listed for 404", "GET", "/v1/receipts/x", 404, "application/problem+json",
			`{"type":"urn:fencegate:problem:stale_owner","title":"stale owner","status":404,"code":"STALE_OWNER"}`},
		{"unknown code", "GET", "/v1/receipts", 401, "application/problem+json",
			`{"type":"urn:fencegate:problem:nope","title":"nope","status":401,"code":"NOPE"}`},
		{"undocumented status", "GET", "/v1/receipts", 418, "application/problem+json", `{}`},
		{"receipt without fenceToken", "GET", "/v1/receipts/x", 200, "application/json",
			`{"receiptId":"r","resource":"a/b","target":"objects/a/b","method":"PUT","segment":1,"operationId":"o",
			  "operationRoot":"r","lease":"l","owner":"w","grantDigest":"sha256:` + strings.Repeat("0", 64) + `",
			  "payloadDigest":"sha256:` + strings.Repeat("0", 64) + `","state":"COMMITTED","createdAt":"2024-01-01T00:00:00Z"}`},
		{"admin 403 with a binding code", "GET", "/v1/admin/state", 403, "application/problem+json",
			`{"type":"urn:fencegate:problem:owner_mismatch","title":"owner mismatch","status":403,"code":"OWNER_MISMATCH"}`},
		{"admin state without keyIds", "POST", "/v1/admin/policy/bump", 200, "application/json",
			`{"policyGeneration":2,"revokedEpochs":[],"trustBundleVersion":1}`},
		{"admin state without modes", "GET", "/v1/admin/state", 200, "application/json",
			`{"policyGeneration":2,"revokedEpochs":[],"trustBundleVersion":1,"keyIds":[]}`},
		{"mode rule with an unknown mode", "PUT", "/v1/admin/modes", 200, "application/json",
			`{"policyGeneration":2,"revokedEpochs":[],"trustBundleVersion":1,"keyIds":[],"modes":[{"pattern":"a/*","mode":"audit"}]}`},
		{"stored receipt without a grant digest", "PUT", "/v1/objects/local/a", 200, "application/json",
			`{"receiptId":"rcpt_1","resource":"local/a","target":"objects/local/a","method":"PUT","fenceToken":0,"segment":1,
			  "operationId":"","operationRoot":"shadow:rcpt_1","lease":"","owner":"w","grantDigest":"","payloadDigest":"sha256:` +
				strings.Repeat("0", 64) + `","state":"COMMITTED","createdAt":"2024-01-01T00:00:00Z"}`},
		{"trust bundle key without epoch", "GET", "/v1/admin/trust-bundle", 200, "application/json",
			`{"version":1,"keys":[{"kty":"OKP","crv":"Ed25519","x":"AA","kid":"k","alg":"EdDSA"}]}`},
	}
	for _, b := range bad {
		req := httptest.NewRequest(b.method, "http://gw"+b.path, nil)
		route, params := e.find(b.method, req.URL.Path)
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 b.status,
			Header:                 http.Header{"Content-Type": {b.ct}},
			Options:                &openapi3filter.Options{IncludeResponseStatus: true},
		}
		in.SetBodyBytes(bytes.Clone([]byte(b.body)))
		if err := openapi3filter.ValidateResponse(context.Background(), in); err == nil {
			t.Errorf("%s: accepted by the spec", b.name)
		}
	}
}

// TestShadowResponsesMatchTheSpec puts a pattern in shadow mode and drives
// refused object writes under it: they are forwarded and answered 200 with
// Fence-Mode and Fence-Verdict and an unstored shadow_ receipt, while a
// resource outside the pattern is still refused. A refused API call under
// shadow mode is answered with the upstream's answer, Fence-Mode,
// Fence-Verdict and a Fence-Receipt naming the unstored shadow_ receipt,
// every one of them declared on the spec's UpstreamAnswer.
func TestShadowResponsesMatchTheSpec(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}
	e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/stage","mode":"shadow","breakGlass":true}`, 200)

	_, lease := e.call("POST", "/v1/leases", tokA, json,
		`{"resource":"local/stage/1","requestId":"req-s","ttlMs":30000,"operationId":"op-s"}`, 201)
	grant, _ := lease["grant"].(string)
	status, _ := lease["statusProof"].(string)
	h, rc := e.call("PUT", "/v1/objects/local/stage/1/a", tokA, fenced(grant, status, 1), "one", 200)
	if h.Get("Fence-Mode") != "" || h.Get("Fence-Receipt") != rc["receiptId"] {
		t.Errorf("an admitted write in shadow mode: %v %v", h, rc)
	}
	_, state := e.call("GET", "/v1/resources/local/stage/1", tokA, nil, "", 200)

	shadowed := func(h http.Header, rc map[string]any, verdict fencegate.Code) {
		t.Helper()
		id, _ := rc["receiptId"].(string)
		if h.Get("Fence-Mode") != "shadow" || h.Get("Fence-Verdict") != string(verdict) || h.Get("Fence-Receipt") != "" ||
			!strings.HasPrefix(id, "shadow_") {
			t.Errorf("shadow answer for %s: headers %v, receipt %v", verdict, h, rc)
		}
		_, p := e.call("GET", "/v1/receipts/"+id, tokA, nil, "", 404)
		wantCode(t, p, fencegate.CodeNotFound)
	}
	h, rc = e.call("PUT", "/v1/objects/local/stage/1/a", tokA, fenced(grant, status, 3), "out of order", 200)
	shadowed(h, rc, fencegate.CodeSegmentOutOfOrder)
	h, rc = e.call("PUT", "/v1/objects/local/stage/1/b", tokA, fenced("a.b.c", status, 1), "bad grant", 200)
	shadowed(h, rc, fencegate.CodeGrantInvalid)
	if rc["grantDigest"] != "" || rc["fenceToken"] != float64(0) {
		t.Errorf("a refused grant left grant fields in the shadow receipt: %v", rc)
	}
	h, rc = e.call("PUT", "/v1/objects/local/stage/1/a", tokB, fenced(grant, status, 2), "not the owner", 200)
	shadowed(h, rc, fencegate.CodeOwnerMismatch)
	h, rc = e.call("DELETE", "/v1/objects/local/stage/1/b", tokA, fenced(grant, status, 5), "", 200)
	shadowed(h, rc, fencegate.CodeSegmentOutOfOrder)
	_, after := e.call("GET", "/v1/resources/local/stage/1", tokA, nil, "", 200)
	if after["highestFence"] != state["highestFence"] || after["lastSegmentSeq"] != state["lastSegmentSeq"] {
		t.Errorf("shadow answers moved the fence: %v -> %v", state, after)
	}
	rh, _ := e.call("GET", "/v1/objects/local/stage/1/a", tokA, nil, "", 200)
	if rh.Get("Fence-Receipt") == "" {
		t.Error("read of a shadow-forwarded object lacks its headers")
	}

	// An API call shadow mode forwards: the upstream's answer, with
	// Fence-Mode and Fence-Verdict declared on UpstreamAnswer, and a
	// Fence-Receipt naming the unstored shadow_ receipt, as that response's
	// Fence-Receipt documents (client.IsShadowReceipt relies on it).
	e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"payouts/acct-1","mode":"shadow","breakGlass":true}`, 200)
	_, apiLease := e.call("POST", "/v1/leases", tokA, json,
		`{"resource":"payouts/acct-1","requestId":"req-p","ttlMs":30000,"operationId":"op-p"}`, 201)
	apiHdr := fenced(apiLease["grant"].(string), apiLease["statusProof"].(string), 1)
	apiHdr["Content-Type"] = "application/json"
	h, _ = e.call("POST", "/v1/apis/payouts/v1/accounts/acct-1/payouts", tokB, apiHdr, `{"amount":1}`, 201)
	if id := h.Get("Fence-Receipt"); h.Get("Fence-Mode") != "shadow" || h.Get("Fence-Verdict") != string(fencegate.CodeOwnerMismatch) ||
		!strings.HasPrefix(id, "shadow_") {
		t.Errorf("shadow answer of an API call: headers %v", h)
	} else {
		_, p := e.call("GET", "/v1/receipts/"+id, tokA, nil, "", 404)
		wantCode(t, p, fencegate.CodeNotFound)
	}
	route, _ := e.find("POST", "/v1/apis/payouts/v1/accounts/acct-1/payouts")
	if d := route.Operation.Responses.Default().Value.Headers["Fence-Receipt"].Value.Description; !strings.Contains(d, "`shadow_`") {
		t.Errorf("UpstreamAnswer's Fence-Receipt does not document the shadow_ ID: %q", d)
	}
	if d := route.Operation.Description; !strings.Contains(d, "shadow") {
		t.Errorf("postApi does not describe shadow mode: %q", d)
	}

	// Not shadowed: no caller credential, and resources outside the pattern.
	_, p := e.call("PUT", "/v1/objects/local/stage/1/a", "", fenced(grant, status, 2), "x", 401)
	wantCode(t, p, fencegate.CodeUnauthenticated)
	_, p = e.call("PUT", "/v1/objects/local/prod/1", tokA, fenced("a.b.c", status, 1), "x", 401)
	wantCode(t, p, fencegate.CodeGrantInvalid)

	// The spec refuses a verdict that shadow mode never forwards.
	req := httptest.NewRequest("PUT", "http://gw/v1/objects/local/stage/1/a", nil)
	route, params := e.find("PUT", req.URL.Path)
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 200,
		Header:                 http.Header{"Content-Type": {"application/json"}, "Fence-Mode": {"shadow"}, "Fence-Verdict": {"UNAUTHENTICATED"}},
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	body, _ := jsonMarshal(rc)
	in.SetBodyBytes([]byte(body))
	if err := openapi3filter.ValidateResponse(context.Background(), in); err == nil {
		t.Error("Fence-Verdict: UNAUTHENTICATED accepted by the spec")
	}
}

// TestLongPollAcquire takes a lease with waitMs while another holder
// releases it.
func TestLongPollAcquire(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}
	_, lease := e.call("POST", "/v1/leases", tokA, json,
		`{"resource":"local/inv/9","requestId":"req-1","ttlMs":30000,"operationId":"op-9"}`, 201)
	leaseID, _ := lease["lease"].(string)
	done := make(chan int, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		req := httptest.NewRequest("DELETE", "http://gw/v1/leases/"+leaseID, nil)
		req.Header.Set("Authorization", "Bearer "+tokA)
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		done <- rec.Code
	}()
	_, got := e.call("POST", "/v1/leases", tokB, json,
		`{"resource":"local/inv/9","requestId":"req-2","ttlMs":30000,"operationId":"op-9","waitMs":20000}`, 201)
	if code := <-done; code != http.StatusOK {
		t.Errorf("release: %d", code)
	}
	if got["owner"] != ownerB || got["fenceToken"].(float64) <= lease["fenceToken"].(float64) {
		t.Errorf("long-poll lease %v after %v", got, lease)
	}
}
