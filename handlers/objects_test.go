package handlers_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/gateway"
)

const res7 = "local/inv/7"

// accepted sets up resource local/inv/7 with owner A's fence 5, segment 1
// committed, and returns A's credentials.
func accepted(t *testing.T, e *env) creds {
	t.Helper()
	a := e.grant(res7, ownerA, 5, nil)
	if r := e.put(tokA, a, "local/inv/7", 1, "v1"); r.status != http.StatusOK {
		t.Fatalf("setup write: %d %s", r.status, r.body)
	}
	return a
}

// forge re-encodes a token's payload after mod, keeping header and signature.
func forge(t *testing.T, token string, mod func(map[string]any)) string {
	t.Helper()
	parts := strings.Split(token, ".")
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	mod(m)
	b, _ := json.Marshal(m)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

func algNone(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"test-key-1"}`))
	return hdr + "." + parts[1] + "."
}

func TestRejectedRequestsChangeNoState(t *testing.T) {
	e := newEnv(t)
	a := accepted(t, e)
	other := e.grant("local/inv/8", ownerA, 9, nil)
	huge := forge(t, a.grant, func(m map[string]any) { m["fenceToken"] = json.Number("18446744073709551615") })
	overflow := forge(t, a.grant, func(m map[string]any) { m["fenceToken"] = json.Number("18446744073709551616") })
	stale := e.grant(res7, ownerA, 6, func(g *fencegate.Grant) { g.PolicyGeneration = 0 })
	revoked := e.grant(res7, ownerA, 7, func(g *fencegate.Grant) { g.IssuerEpoch = 1 })
	h := func(g, s, seg string) map[string]string {
		return map[string]string{"Fence-Grant": g, "Fence-Status": s, "Fence-Segment": seg}
	}
	cases := []struct {
		name, path, token string
		hdr               map[string]string
		status            int
		code              string
		setup             func()
	}{
		{"NoCredential", "/v1/objects/local/inv/7", "", h(a.grant, a.status, "2"), 401, "UNAUTHENTICATED", nil},
		{"UnknownCredential", "/v1/objects/local/inv/7", "nope", h(a.grant, a.status, "2"), 401, "UNAUTHENTICATED", nil},
		{"NoGrant", "/v1/objects/local/inv/7", tokA, h("", a.status, "2"), 401, "GRANT_INVALID", nil},
		{"AlgNone", "/v1/objects/local/inv/7", tokA, h(algNone(t, a.grant), a.status, "2"), 401, "GRANT_INVALID", nil},
		{"TamperedHugeFence", "/v1/objects/local/inv/7", tokA, h(huge, a.status, "1"), 401, "GRANT_INVALID", nil},
		{"FenceOutsideUint64", "/v1/objects/local/inv/7", tokA, h(overflow, a.status, "1"), 401, "GRANT_INVALID", nil},
		{"StatusOfAnotherGrant", "/v1/objects/local/inv/7", tokA, h(a.grant, other.status, "2"), 401, "STATUS_INVALID", nil},
		{"NoStatus", "/v1/objects/local/inv/7", tokA, h(a.grant, "", "2"), 401, "STATUS_INVALID", nil},
		{"StatusNotHeld", "/v1/objects/local/inv/7", tokA, h(a.grant, e.kit.Status(a.vg, func(s *fencegate.Status) { s.State = fencegate.StateExpired }), "2"), 401, "STATUS_INVALID", nil},
		{"OwnerMismatch", "/v1/objects/local/inv/7", tokB, h(a.grant, a.status, "2"), 403, "OWNER_MISMATCH", nil},
		{"ResourceMismatch", "/v1/objects/local/inv/8", tokA, h(a.grant, a.status, "2"), 403, "RESOURCE_MISMATCH", nil},
		{"SiblingPrefixIsNotCovered", "/v1/objects/local/inv/70", tokA, h(a.grant, a.status, "2"), 403, "RESOURCE_MISMATCH", nil},
		{"CaseTrickIsNotCovered", "/v1/objects/local/INV/7", tokA, h(a.grant, a.status, "2"), 403, "RESOURCE_MISMATCH", nil},
		{"DotDotTraversal", "/v1/objects/local/inv/7/../8", tokA, h(a.grant, a.status, "2"), 400, "INVALID_REQUEST", nil},
		{"EncodedSlash", "/v1/objects/local/inv%2F7", tokA, h(a.grant, a.status, "2"), 400, "INVALID_REQUEST", nil},
		{"EmptySegment", "/v1/objects/local/inv//7", tokA, h(a.grant, a.status, "2"), 400, "INVALID_REQUEST", nil},
		{"NonNFCName", "/v1/objects/local/inv/7/e\u0301", tokA, h(a.grant, a.status, "2"), 400, "INVALID_REQUEST", nil},
		{"SegmentZero", "/v1/objects/local/inv/7", tokA, h(a.grant, a.status, "0"), 400, "INVALID_REQUEST", nil},
		{"PolicyStale", "/v1/objects/local/inv/7", tokA, h(stale.grant, stale.status, "1"), 403, "POLICY_STALE", nil},
		{"EpochRevoked", "/v1/objects/local/inv/7", tokA, h(revoked.grant, revoked.status, "1"), 401, "EPOCH_REVOKED", func() { e.policy.revoked.Store(1) }},
		{"SkippedSegment", "/v1/objects/local/inv/7", tokA, h(a.grant, a.status, "3"), 409, "SEGMENT_OUT_OF_ORDER", func() { e.policy.revoked.Store(0) }},
		{"UnknownStore", "/v1/objects/nowhere/inv/7", tokA, h(a.grant, a.status, "2"), 404, "NOT_FOUND", nil},
		// A Content-Type the object could not keep is refused before the
		// write is admitted, not by the store after it.
		{"ContentTypeTooLong", "/v1/objects/local/inv/7", tokA, withHeader(h(a.grant, a.status, "2"), "Content-Type", "text/plain; x="+strings.Repeat("a", fencegate.MaxContentType)), 400, "INVALID_REQUEST", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup()
			}
			before := e.snap(res7, "inv/7")
			r := e.do("PUT", c.path, c.token, c.hdr, "forged")
			wantProblem(t, r, c.status, c.code)
			if after := e.snap(res7, "inv/7"); after != before {
				t.Fatalf("state changed:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

// withHeader is hdr with name set to value.
func withHeader(hdr map[string]string, name, value string) map[string]string {
	hdr[name] = value
	return hdr
}

func TestLowerFenceIsRejectedWithoutStateChange(t *testing.T) {
	e := newEnv(t)
	a := accepted(t, e)
	b := e.grant(res7, ownerB, 6, nil)
	if r := e.put(tokB, b, "local/inv/7", 1, "B"); r.status != http.StatusOK {
		t.Fatalf("B: %d %s", r.status, r.body)
	}
	before := e.snap(res7, "inv/7")
	wantProblem(t, e.put(tokA, a, "local/inv/7", 2, "A late"), 409, "STALE_OWNER")
	if after := e.snap(res7, "inv/7"); after != before || after.object != "B" {
		t.Fatalf("state changed: %+v -> %+v", before, after)
	}
}

func TestReplayReturnsOriginalReceiptWithoutForwarding(t *testing.T) {
	e := newEnv(t)
	a := e.grant(res7, ownerA, 5, nil)
	first := e.put(tokA, a, "local/inv/7", 1, "v1")
	puts := e.objects.puts.Load()
	again := e.put(tokA, a, "local/inv/7", 1, "v1")
	if again.status != 200 || again.json["receiptId"] != first.json["receiptId"] || again.header.Get("Fence-Replay") != "true" {
		t.Fatalf("replay answered %d %s (first %s)", again.status, again.body, first.body)
	}
	if e.objects.puts.Load() != puts {
		t.Fatal("a replay was forwarded to the object store")
	}
}

func TestDifferentPayloadIsQuarantinedAndNotForwarded(t *testing.T) {
	e := newEnv(t)
	a := accepted(t, e)
	before := e.snap(res7, "inv/7")
	r := e.put(tokA, a, "local/inv/7", 1, "something else")
	wantProblem(t, r, 409, "QUARANTINED")
	if r.json["receiptId"] == "" {
		t.Fatal("QUARANTINED names no receipt")
	}
	if after := e.snap(res7, "inv/7"); after != before {
		t.Fatalf("state changed: %+v -> %+v", before, after)
	}
	q := e.do("GET", "/v1/quarantine?resource="+res7, tokA, nil, "")
	if list, _ := q.json["quarantine"].([]any); len(list) != 1 {
		t.Fatalf("quarantine list = %s", q.body)
	}
}

// TestQuarantineKeepsThePayloadOnceBesideTheAcceptedOne: the refused payload
// is kept in one record however often it comes again (attempts count), the
// list leaves payloads out, and GET /v1/quarantine/{id} shows the refused
// payload beside the accepted receipt and the object it wrote. Refused
// reads (unknown ID, no credential, bad page) leave the state as it was.
func TestQuarantineKeepsThePayloadOnceBesideTheAcceptedOne(t *testing.T) {
	e := newEnv(t)
	a := accepted(t, e)
	before := e.snap(res7, "inv/7")
	for range 3 {
		wantProblem(t, e.put(tokA, a, "local/inv/7", 1, "something else"), 409, "QUARANTINED")
	}
	if after := e.snap(res7, "inv/7"); after != before {
		t.Fatalf("state changed: %+v -> %+v", before, after)
	}
	q := e.do("GET", "/v1/quarantine?resource="+res7+"&limit=10", tokA, nil, "")
	list, _ := q.json["quarantine"].([]any)
	if len(list) != 1 {
		t.Fatalf("three identical refusals: quarantine list = %s, want one record", q.body)
	}
	rec, _ := list[0].(map[string]any)
	if rec["attempts"] != float64(3) || rec["payloadKept"] != true || rec["payload"] != nil || rec["payloadSize"] != float64(len("something else")) {
		t.Fatalf("listed record = %v", rec)
	}
	id, _ := rec["quarantineId"].(string)
	v := e.do("GET", "/v1/quarantine/"+id, tokA, nil, "")
	if v.status != http.StatusOK {
		t.Fatalf("GET /v1/quarantine/%s: %d %s", id, v.status, v.body)
	}
	var view struct {
		Quarantine          fencegate.Quarantine
		Accepted            fencegate.Receipt
		AcceptedPayload     []byte
		AcceptedPayloadKept bool
	}
	if err := json.Unmarshal([]byte(v.body), &view); err != nil {
		t.Fatal(err)
	}
	if string(view.Quarantine.Payload) != "something else" || view.Accepted.ID != view.Quarantine.ReceiptID ||
		view.Accepted.Segment != 1 || !view.AcceptedPayloadKept || string(view.AcceptedPayload) != "v1" {
		t.Fatalf("quarantine view = %s", v.body)
	}
	wantProblem(t, e.do("GET", "/v1/quarantine/q_nope", tokA, nil, ""), 404, "NOT_FOUND")
	wantProblem(t, e.do("GET", "/v1/quarantine/"+id, "", nil, ""), 401, "UNAUTHENTICATED")
	wantProblem(t, e.do("GET", "/v1/quarantine?limit=0", tokA, nil, ""), 400, "INVALID_REQUEST")
	wantProblem(t, e.do("GET", "/v1/quarantine?cursor=nope", tokA, nil, ""), 400, "INVALID_REQUEST")
	if after := e.snap(res7, "inv/7"); after != before {
		t.Fatalf("state changed by reads: %+v -> %+v", before, after)
	}
}

func TestSegmentsUnderOneGrantAdvanceInOrder(t *testing.T) {
	e := newEnv(t)
	a := accepted(t, e)
	for seg := 2; seg <= 4; seg++ {
		if r := e.put(tokA, a, "local/inv/7/part", seg, "p"+string(rune('0'+seg))); r.status != 200 || r.json["segment"] != float64(seg) {
			t.Fatalf("segment %d: %d %s", seg, r.status, r.body)
		}
	}
	st := e.do("GET", "/v1/resources/"+res7, tokA, nil, "")
	if st.json["lastSegmentSeq"] != float64(4) || st.json["highestFence"] != float64(5) {
		t.Fatalf("resource = %s", st.body)
	}
}

func TestEqualFenceUnderAnotherLeaseIsRegression(t *testing.T) {
	e := newEnv(t)
	accepted(t, e)
	twin := e.grant(res7, ownerA, 5, func(g *fencegate.Grant) { g.Lease, g.OperationRoot = "lease-other", "root-other" })
	before := e.snap(res7, "inv/7")
	wantProblem(t, e.put(tokA, twin, "local/inv/7", 2, "x"), 409, "FENCE_REGRESSION")
	if after := e.snap(res7, "inv/7"); after != before {
		t.Fatalf("state changed: %+v -> %+v", before, after)
	}
}

// TestReadReturnsBytesAndFenceMetadata: a read answers the object's bytes
// with its fence metadata, as inert data (nosniff, sandbox), and needs a
// credential.
func TestReadReturnsBytesAndFenceMetadata(t *testing.T) {
	e := newEnv(t)
	accepted(t, e)
	r := e.do("GET", "/v1/objects/local/inv/7", tokB, nil, "")
	if r.status != 200 || r.body != "v1" || r.header.Get("Fence-Token") != "5" || r.header.Get("Fence-Segment") != "1" || r.header.Get("ETag") == "" {
		t.Fatalf("read: %d %q %v", r.status, r.body, r.header)
	}
	// An object is data, never a page of the origin the console shares.
	if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Content-Security-Policy") != "sandbox" {
		t.Fatalf("read served without nosniff and a sandbox: %v", r.header)
	}
	wantProblem(t, e.do("GET", "/v1/objects/local/inv/7", "", nil, ""), 401, "UNAUTHENTICATED")
}

func TestDeleteIsFencedAndConditional(t *testing.T) {
	e := newEnv(t)
	a := accepted(t, e)
	d := e.do("DELETE", "/v1/objects/local/inv/7", tokA, map[string]string{
		"Fence-Grant": a.grant, "Fence-Status": a.status, "Fence-Segment": "2"}, "")
	if d.status != 200 || d.json["state"] != "COMMITTED" {
		t.Fatalf("delete: %d %s", d.status, d.body)
	}
	wantProblem(t, e.do("GET", "/v1/objects/local/inv/7", tokA, nil, ""), 404, "NOT_FOUND")
}

func TestReceiptsAreListedByOperation(t *testing.T) {
	e := newEnv(t)
	a := accepted(t, e)
	e.put(tokA, a, "local/inv/7", 2, "v2")
	r := e.do("GET", "/v1/receipts?operationId=op-1", tokA, nil, "")
	list, _ := r.json["receipts"].([]any)
	if len(list) != 2 {
		t.Fatalf("receipts = %s", r.body)
	}
	wantProblem(t, e.do("GET", "/v1/receipts", tokA, nil, ""), 400, "INVALID_REQUEST")
}

func TestClientDigestMismatchIsRefused(t *testing.T) {
	e := newEnv(t)
	a := e.grant(res7, ownerA, 5, nil)
	before := e.snap(res7, "inv/7")
	r := e.do("PUT", "/v1/objects/local/inv/7", tokA, map[string]string{
		"Fence-Grant": a.grant, "Fence-Status": a.status, "Fence-Segment": "1",
		"Content-Digest": "sha-256=:" + base64.StdEncoding.EncodeToString(make([]byte, 32)) + ":"}, "body")
	wantProblem(t, r, 400, "INVALID_REQUEST")
	if after := e.snap(res7, "inv/7"); after != before {
		t.Fatalf("state changed: %+v -> %+v", before, after)
	}
}

func TestExpiredOwnerIsRefusedAndToldWhenSuperseded(t *testing.T) {
	e := newEnv(t)
	a := accepted(t, e)
	e.kit.Advance(6 * time.Second) // A pauses past its status proof's life
	before := e.snap(res7, "inv/7")
	wantProblem(t, e.put(tokA, a, "local/inv/7", 2, "late"), 401, "STATUS_INVALID")
	b := e.grant(res7, ownerB, 6, nil)
	if r := e.put(tokB, b, "local/inv/7", 1, "B"); r.status != 200 {
		t.Fatalf("B: %d %s", r.status, r.body)
	}
	mid := e.snap(res7, "inv/7")
	wantProblem(t, e.put(tokA, a, "local/inv/7", 2, "late"), 409, "STALE_OWNER")
	if after := e.snap(res7, "inv/7"); after != mid || before.object != "v1" || after.object != "B" {
		t.Fatalf("state changed: %+v -> %+v", mid, after)
	}
}

// clockReader advances the test clock while the body is being read, like an
// upload that outlasts its status proof.
type clockReader struct {
	r       *strings.Reader
	advance func()
	done    bool
}

func (c *clockReader) Read(p []byte) (int, error) {
	if !c.done {
		c.done = true
		c.advance()
	}
	return c.r.Read(p)
}

func TestUploadOutlastingItsStatusProofIsRefusedWithoutStateChange(t *testing.T) {
	e := newEnv(t)
	a := e.grant(res7, ownerA, 5, nil)
	before := e.snap(res7, "inv/7")
	// The worker pauses mid-body past its proof's life (and maybe its lease).
	body := &clockReader{r: strings.NewReader("long upload"), advance: func() { e.kit.Advance(30 * time.Second) }}
	w := e.putBody(tokA, a, "local/inv/7", 1, body)
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "STATUS_INVALID") {
		t.Fatalf("upload outlasting its proof: %d %s", w.Code, w.Body.String())
	}
	if after := e.snap(res7, "inv/7"); after != before {
		t.Fatalf("state changed: %+v -> %+v", before, after)
	}
}

func TestKeyFencedUnderOneResourceRefusesANestedResourcesGrant(t *testing.T) {
	e := newEnv(t)
	outer := e.grant("local/inv", ownerA, 5, nil)
	if r := e.put(tokA, outer, "local/inv/7", 1, "outer"); r.status != 200 {
		t.Fatalf("outer: %d %s", r.status, r.body)
	}
	inner := e.grant(res7, ownerB, 50, nil)
	before := e.snap(res7, "inv/7")
	wantProblem(t, e.put(tokB, inner, "local/inv/7", 1, "inner"), 403, "RESOURCE_MISMATCH")
	if after := e.snap(res7, "inv/7"); after != before || after.object != "outer" {
		t.Fatalf("state changed: %+v -> %+v", before, after)
	}
}

func TestOperatorCommitsAnObjectReceiptOnlyIfTheObjectCarriesIt(t *testing.T) {
	e := newEnv(t)
	a := e.grant(res7, ownerA, 5, nil)
	id, path := e.lostPut(a)
	// The write never landed: the operator cannot call it committed, and
	// the refusal changes nothing.
	before, rcBefore := e.snap(res7, "inv/7"), e.receiptByID(id)
	wantProblem(t, e.do("POST", path, "ops", nil, `{"state":"COMMITTED"}`), 400, "INVALID_REQUEST")
	if after, rcAfter := e.snap(res7, "inv/7"), e.receiptByID(id); after != before || !reflect.DeepEqual(rcAfter, rcBefore) {
		t.Fatalf("a refused verdict changed state: %+v %+v -> %+v %+v", before, rcBefore, after, rcAfter)
	}
	if r := e.do("POST", path, "ops", nil, `{"state":"NOT_APPLIED","note":"checked"}`); r.status != 200 || r.json["state"] != "NOT_APPLIED" {
		t.Fatalf("resolve NOT_APPLIED: %d %s", r.status, r.body)
	}
	if r := e.put(tokA, a, "local/inv/7", 1, "v1"); r.status != 200 {
		t.Fatalf("segment after NOT_APPLIED: %d %s", r.status, r.body)
	}
}

// TestOperatorVerdictOnAnUnknownDeleteWaitsForTheStore: a COMMITTED verdict
// on an UNKNOWN delete needs the store to say the object is gone; while the
// store cannot answer, the verdict is BACKEND_UNAVAILABLE (503, retry), not
// INVALID_REQUEST, and the receipt stays UNKNOWN.
func TestOperatorVerdictOnAnUnknownDeleteWaitsForTheStore(t *testing.T) {
	e := newEnv(t)
	a := e.grant(res7, ownerA, 5, nil)
	if r := e.put(tokA, a, "local/inv/7", 1, "v1"); r.status != 200 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	e.objects.lose.Store(true)
	lost := e.do("DELETE", "/v1/objects/local/inv/7", tokA, map[string]string{
		"Fence-Grant": a.grant, "Fence-Status": a.status, "Fence-Segment": "2"}, "")
	wantProblem(t, lost, 502, "MUTATION_UNKNOWN")
	id, _ := lost.json["receiptId"].(string)
	path := "/v1/unknown/" + id + "/resolve"

	e.objects.deaf.Store(true)
	wantProblem(t, e.do("POST", path, "ops", nil, `{"state":"COMMITTED"}`), 503, "BACKEND_UNAVAILABLE")
	if rc, err := e.store.Receipt(context.Background(), id); err != nil || rc.State != fencegate.ReceiptUnknown {
		t.Fatalf("receipt after the refused verdict: %s, %v", rc.State, err)
	}
	// The store answers again: the object is still there, so the delete is
	// not committed.
	wantProblem(t, e.do("POST", path, "ops", nil, `{"state":"COMMITTED"}`), 400, "INVALID_REQUEST")
}

// Rule: an operator's NOT_APPLIED on an object write waits, like the
// reconciler's own, until the write can no longer land (its expiry, the
// store's slack and the orphan grace): overdue before that, it is refused
// STILL_RECONCILING and nothing changes; after it, it is taken.
func TestOperatorNotAppliedOnAnObjectWriteWaitsUntilItCannotLand(t *testing.T) {
	e := newEnv(t)
	e.srv.Reconciler = &gateway.Reconciler{Store: e.store, Now: e.kit.Now, Deadline: 15 * time.Minute,
		Resolver: func(string) gateway.Resolver {
			return gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"local": e.objects}, Now: e.kit.Now,
				EffectTimeout: time.Minute, Grace: 20 * time.Minute}
		}}
	a := e.grant(res7, ownerA, 5, nil)
	id, path := e.lostPut(a)
	e.kit.Advance(16 * time.Minute) // overdue, and the write may land until about 21 minutes
	before, rcBefore := e.snap(res7, "inv/7"), e.receiptByID(id)
	wantProblem(t, e.do("POST", path, "ops", nil, `{"state":"NOT_APPLIED"}`), 409, "STILL_RECONCILING")
	if after, rcAfter := e.snap(res7, "inv/7"), e.receiptByID(id); after != before || !reflect.DeepEqual(rcAfter, rcBefore) {
		t.Fatalf("a refused verdict changed state: %+v %+v -> %+v %+v", before, rcBefore, after, rcAfter)
	}
	e.kit.Advance(6 * time.Minute)
	if r := e.do("POST", path, "ops", nil, `{"state":"NOT_APPLIED","note":"checked"}`); r.status != 200 || r.json["state"] != "NOT_APPLIED" {
		t.Fatalf("resolve NOT_APPLIED once the write cannot land: %d %s", r.status, r.body)
	}
}

// receiptByID reads receipt id from the fence store.
func (e *env) receiptByID(id string) fencegate.Receipt {
	e.t.Helper()
	rc, err := e.store.Receipt(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return rc
}

// Rule: on a shadow-mode resource only a verdict (a stale or mismatched
// grant, say) is left to Apply to record and forward; a refusal shadow mode
// never forwards, such as the access policy's, is answered before the body
// is read, as in enforce mode. It was read (spooled) first, then refused.
func TestShadowModeAnswersAnAccessRefusalBeforeTheBody(t *testing.T) {
	e := newEnv(t)
	modes, err := gateway.NewModes(gateway.ModeRule{Pattern: "local/*", Mode: gateway.Shadow})
	if err != nil {
		t.Fatal(err)
	}
	access, err := authz.New([]authz.Rule{{Identity: ownerA, Lease: []string{"local/*"}}})
	if err != nil {
		t.Fatal(err)
	}
	if e.srv.Gateway, err = gateway.New(gateway.Config{Verifier: e.kit.Verifier(), Store: e.store, Policy: e.policy,
		Now: e.kit.Now, Modes: modes, Access: access}); err != nil {
		t.Fatal(err)
	}
	b := e.grant(res7, ownerB, 5, nil) // ownerB may lease nothing
	body := &countingReader{r: strings.NewReader(strings.Repeat("x", 64<<10))}
	w := e.putBody(tokB, b, "local/inv/7", 1, body)
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "FORBIDDEN") {
		t.Fatalf("a write the access policy forbids, in shadow mode: %d %s", w.Code, w.Body.String())
	}
	if body.n != 0 {
		t.Fatalf("%d bytes of the refused write's body were read", body.n)
	}
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r *strings.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// putBody sends a fenced PUT of key whose body is r, a reader the test
// watches (e.put takes the body as a string).
func (e *env) putBody(token string, c creds, key string, seg int, r io.Reader) *httptest.ResponseRecorder {
	req := httptest.NewRequest("PUT", "http://gw/v1/objects/"+key, r)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Fence-Grant", c.grant)
	req.Header.Set("Fence-Status", c.status)
	req.Header.Set("Fence-Segment", strconv.Itoa(seg))
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	return w
}

// lostPut writes local/inv/7 segment 1 under a with the store losing its
// answer (MUTATION_UNKNOWN) and returns the UNKNOWN receipt and its resolve
// path.
func (e *env) lostPut(a creds) (id, path string) {
	e.t.Helper()
	e.objects.lose.Store(true)
	lost := e.put(tokA, a, "local/inv/7", 1, "v1")
	wantProblem(e.t, lost, 502, "MUTATION_UNKNOWN")
	id, _ = lost.json["receiptId"].(string)
	return id, "/v1/unknown/" + id + "/resolve"
}
