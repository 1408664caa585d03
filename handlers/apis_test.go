package handlers_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/e2e/upstream"
	"github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

const (
	payerA     = "spiffe://test/payer-a"
	payerB     = "spiffe://test/payer-b"
	payerTokA  = "payer-token-a"
	payerTokB  = "payer-token-b"
	upSecret   = "Bearer sk_live_upstream"
	payoutRes  = "payouts/acc_1"
	payoutPath = "/v1/apis/payouts/v1/accounts/acc_1/payouts"
	payoutBody = `{"amount":500,"currency":"eur"}`
)

// apiEnv is a gateway (embedded fence store, real verifier) fronting a
// payments upstream through the payouts API.
type apiEnv struct {
	t      *testing.T
	kit    *prooftest.Kit
	dbPath string
	store  fencegate.FenceStore
	pay    *upstream.Payments
	up     *httptest.Server
	api    *httpapi.API
	rc     *gateway.Reconciler
	h      http.Handler
	// mayRead, when set, is the server's read policy.
	mayRead func(identity, resource string) bool

	mu   sync.Mutex
	seen []http.Header // headers of every upstream request
}

// newAPIEnv builds the environment; pay may be shared between environments
// (nil for a fresh one); mod adjusts the API's configuration.
func newAPIEnv(t *testing.T, kit *prooftest.Kit, pay *upstream.Payments, mod func(*httpapi.APIConfig)) *apiEnv {
	t.Helper()
	t.Setenv("FG_TEST_PAYOUTS_KEY", "sk_live_upstream")
	if kit == nil {
		kit = prooftest.New(t)
	}
	if pay == nil {
		pay = upstream.New(upstream.Options{Credential: upSecret, Now: kit.Now})
	}
	e := &apiEnv{t: t, kit: kit, pay: pay, dbPath: filepath.Join(t.TempDir(), "fence.db")}
	e.up = httptest.NewServer(http.HandlerFunc(e.record))
	t.Cleanup(func() { e.up.Close() })
	c := httpapi.APIConfig{
		Name: "payouts", BaseURL: e.up.URL,
		Credentials:         &httpapi.Credentials{Prefix: "Bearer ", Env: "FG_TEST_PAYOUTS_KEY"},
		KeepResponseHeaders: []string{"Request-Id"},
		Contract:            httpapi.Contract{Idempotency: &httpapi.Idempotency{KeyRetention: 24 * time.Hour}},
		Routes:              []httpapi.Route{{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"}},
	}
	if mod != nil {
		mod(&c)
	}
	// No keep-alive, so that a lost answer is not resent by the transport itself.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var err error
	if e.api, err = httpapi.New(c, client, httpapi.WithClock(kit.Now)); err != nil {
		t.Fatal(err)
	}
	e.open()
	return e
}

// open (re)starts the gateway process on the store file.
func (e *apiEnv) open() {
	st, err := embedded.Open(e.dbPath)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = st.Close() })
	e.store = st
	gw, err := gateway.New(gateway.Config{Verifier: e.kit.Verifier(), Store: st,
		Policy: gateway.StaticPolicy{Generation: 1}, Now: e.kit.Now, Resolver: httpapi.Resolvers{"payouts": e.api}.For})
	if err != nil {
		e.t.Fatal(err)
	}
	e.rc = &gateway.Reconciler{Store: st, Resolver: httpapi.Resolvers{"payouts": e.api}.For, Now: e.kit.Now}
	e.h = handlers.Router(&handlers.Server{
		Gateway: gw, Reconciler: e.rc, APIs: map[string]*httpapi.API{"payouts": e.api},
		Auth:      handlers.NewBearerTokens(map[string]string{payerTokA: payerA, payerTokB: payerB}),
		AdminAuth: handlers.NewBearerTokens(map[string]string{"admin-token": "ops"}),
		SpoolDir:  e.t.TempDir(), MaxBody: 1 << 20, Now: e.kit.Now, MayRead: func(id, res string) bool { return e.mayRead == nil || e.mayRead(id, res) },
	})
}

func (e *apiEnv) record(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.seen = append(e.seen, r.Header.Clone())
	e.mu.Unlock()
	e.pay.ServeHTTP(w, r)
}

// payer holds one owner's grant.
type payer struct {
	token string
	vg    fencegate.VerifiedGrant
	grant string
}

// grantFor issues owner a grant on payoutRes at fence (lease and root follow the fence).
func (e *apiEnv) grantFor(owner, token string, fence uint64) payer {
	tok, vg := e.kit.VerifiedGrant(func(g *fencegate.Grant) {
		g.Resource, g.Owner, g.FenceToken = payoutRes, owner, fence
		g.Lease = "lease-" + strconv.FormatUint(fence, 10)
		g.OperationRoot = "root-" + strconv.FormatUint(fence, 10)
	})
	return payer{token: token, vg: vg, grant: tok}
}

type apiReply struct {
	status int
	header http.Header
	body   []byte
	code   string
}

func (e *apiEnv) send(method, path, token string, hdr map[string]string, body string) apiReply {
	e.t.Helper()
	req := httptest.NewRequest(method, "http://gw"+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	res := w.Result()
	b, _ := io.ReadAll(res.Body)
	out := apiReply{status: res.StatusCode, header: res.Header, body: b}
	var p struct {
		Code string `json:"code"`
	}
	if res.Header.Get("Content-Type") == "application/problem+json" {
		_ = json.Unmarshal(b, &p)
	}
	out.code = p.Code
	return out
}

// pay sends a payout under p's grant at segment seg.
func (e *apiEnv) payout(p payer, seg int, body string) apiReply {
	e.t.Helper()
	return e.send("POST", payoutPath, p.token, map[string]string{
		"Fence-Grant": p.grant, "Fence-Status": e.kit.Status(p.vg, nil),
		"Fence-Segment": strconv.Itoa(seg), "Content-Type": "application/json"}, body)
}

func wantCode(t *testing.T, r apiReply, status int, code fencegate.Code) {
	t.Helper()
	if r.status != status || r.code != string(code) {
		t.Fatalf("want %d %s, got %d %s", status, code, r.status, r.body)
	}
}

func wantPaid(t *testing.T, r apiReply) upstream.Payout {
	t.Helper()
	var po upstream.Payout
	if r.status != http.StatusOK || json.Unmarshal(r.body, &po) != nil || po.ID == "" || r.header.Get("Fence-Receipt") == "" {
		t.Fatalf("want the upstream's payout, got %d %v %s", r.status, r.header, r.body)
	}
	return po
}

// apiState is what a refused call must leave unchanged.
type apiState struct {
	highest, lastSeg uint64
	pending          string
	receipts         int
	requests         int
}

func (e *apiEnv) state() apiState {
	e.t.Helper()
	ctx := context.Background()
	var s apiState
	if row, err := e.store.Resource(ctx, payoutRes); err == nil {
		s.highest, s.lastSeg, s.pending = row.HighestFence, row.LastSegmentSeq, row.PendingReceipt
	}
	for _, st := range []fencegate.ReceiptState{fencegate.ReceiptPending, fencegate.ReceiptCommitted,
		fencegate.ReceiptFailed, fencegate.ReceiptUnknown, fencegate.ReceiptNotApplied} {
		l, err := e.store.ReceiptsByState(ctx, st, fencegate.Page{Limit: fencegate.MaxPageLimit})
		if err != nil {
			e.t.Fatal(err)
		}
		s.receipts += len(l.Receipts)
	}
	s.requests = e.pay.Requests()
	return s
}

func (e *apiEnv) wantUnchanged(before apiState) {
	e.t.Helper()
	if after := e.state(); after != before {
		e.t.Fatalf("a refused call changed state:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestOldFenceNeverPaysAfterNewFence(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	wantPaid(t, e.payout(a, 1, payoutBody))

	// A's second payout loses its answer: the resource is held UNKNOWN, and the
	// new owner's first call waits for it instead of racing it.
	e.pay.Inject(upstream.DropResponse)
	lost := e.payout(a, 2, payoutBody)
	wantCode(t, lost, http.StatusBadGateway, fencegate.CodeMutationUnknown)
	b := e.grantFor(payerB, payerTokB, 2)
	before := e.state()
	wantCode(t, e.payout(b, 1, payoutBody), http.StatusConflict, fencegate.CodeResourceBusy)
	e.wantUnchanged(before)

	if n, err := e.rc.RunOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("reconcile: %d %v", n, err)
	}
	wantPaid(t, e.payout(b, 1, payoutBody))
	if e.pay.Effects() != 3 {
		t.Fatalf("effects = %d, want 3", e.pay.Effects())
	}
	before = e.state()
	for seg := 2; seg <= 3; seg++ {
		wantCode(t, e.payout(a, seg, payoutBody), http.StatusConflict, fencegate.CodeStaleOwner)
	}
	e.wantUnchanged(before)
	if last := e.pay.Payouts()[2]; last.IdempotencyKey == "" || e.pay.Effects() != 3 {
		t.Fatalf("the old fence paid after the new fence: %+v", e.pay.Payouts())
	}
}

func TestLostAnswerIsReconciledAndReplayReturnsSavedAnswer(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	e.pay.Inject(upstream.DropResponse)
	lost := e.payout(a, 1, payoutBody)
	wantCode(t, lost, http.StatusBadGateway, fencegate.CodeMutationUnknown)
	var p struct {
		ReceiptID string `json:"receiptId"`
	}
	_ = json.Unmarshal(lost.body, &p)
	if p.ReceiptID == "" {
		t.Fatalf("MUTATION_UNKNOWN without a receipt ID: %s", lost.body)
	}
	if l := e.send("GET", "/v1/unknown", payerTokA, nil, ""); !strings.Contains(string(l.body), p.ReceiptID) {
		t.Fatalf("unknown list lacks %s: %s", p.ReceiptID, l.body)
	}
	if n, err := e.rc.RunOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("reconcile: %d %v", n, err)
	}
	requests := e.pay.Requests()
	replay := e.payout(a, 1, payoutBody)
	po := wantPaid(t, replay)
	if replay.header.Get("Fence-Replay") != "true" || replay.header.Get("Fence-Receipt") != p.ReceiptID {
		t.Fatalf("replay headers %v", replay.header)
	}
	if po.IdempotencyKey == "" || e.pay.Effects() != 1 || e.pay.Requests() != requests {
		t.Fatalf("replay reached upstream: effects %d, requests %d -> %d", e.pay.Effects(), requests, e.pay.Requests())
	}

	// After the upstream forgot the key, the gateway still answers from the receipt.
	e.kit.Advance(25 * time.Hour)
	a = e.grantFor(payerA, payerTokA, 1)
	again := e.payout(a, 1, payoutBody)
	if wantPaid(t, again); string(again.body) != string(replay.body) || e.pay.Requests() != requests {
		t.Fatalf("replay after key retention: %s (requests %d)", again.body, e.pay.Requests())
	}
}

func TestCrashMidCallIsReconciledAfterRestart(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	sum := sha256.Sum256([]byte(payoutBody))
	call := e.api.Call("POST", "/v1/accounts/acc_1/payouts", http.Header{"Content-Type": {"application/json"}},
		strings.NewReader(payoutBody), int64(len(payoutBody)))
	target := httpapi.Target("payouts", "/v1/accounts/acc_1/payouts")
	kept, err := call.KeptRequest(fencegate.Receipt{Resource: a.vg.Resource, OperationRoot: a.vg.OperationRoot,
		FenceToken: a.vg.FenceToken, Segment: 1, Target: target, Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := e.store.Admit(context.Background(), fencegate.AdmitRequest{
		Grant: a.vg, Segment: 1, Target: target, Method: "POST", Request: kept,
		PayloadDigest: "sha256:" + hex.EncodeToString(sum[:]), ReceiptID: "rcpt_crashed", Now: e.kit.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	// The call reaches the upstream; the gateway dies before settling.
	if _, err := call.Apply(context.Background(), adm.Receipt, ""); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Close(); err != nil {
		t.Fatal(err)
	}
	e.open()
	e.kit.Advance(3 * time.Minute) // past the reconciler's orphan age
	if n, err := e.rc.RunOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("reconcile after restart: %d %v", n, err)
	}
	requests := e.pay.Requests()
	a = e.grantFor(payerA, payerTokA, 1)
	replay := e.payout(a, 1, payoutBody)
	wantPaid(t, replay)
	if replay.header.Get("Fence-Receipt") != "rcpt_crashed" || e.pay.Effects() != 1 || e.pay.Requests() != requests {
		t.Fatalf("replay %v, effects %d, requests %d", replay.header, e.pay.Effects(), e.pay.Requests())
	}
}

func TestUndeclaredRouteIsRefused(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	hdr := map[string]string{"Fence-Grant": a.grant, "Fence-Status": e.kit.Status(a.vg, nil), "Fence-Segment": "1"}
	before := e.state()
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/apis/payouts/v1/accounts/acc_1/refunds"},
		{"PUT", payoutPath},
		{"POST", "/v1/apis/other/v1/accounts/acc_1/payouts"},
		{"POST", "/v1/apis/payouts/v1/accounts/acc_1/payouts/extra"},
	} {
		wantCode(t, e.send(c.method, c.path, payerTokA, hdr, payoutBody), http.StatusNotFound, fencegate.CodeNotFound)
	}
	wantCode(t, e.send("POST", payoutPath+"?amount=1", payerTokA, hdr, payoutBody), http.StatusBadRequest, fencegate.CodeInvalidRequest)
	wantCode(t, e.send("POST", "/v1/apis/payouts/v1/accounts/acc_1%2Fpayouts", payerTokA, hdr, payoutBody), http.StatusBadRequest, fencegate.CodeInvalidRequest)
	e.wantUnchanged(before)
}

func TestDerivedResourceMustBeCoveredByGrant(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	before := e.state()
	r := e.send("POST", "/v1/apis/payouts/v1/accounts/acc_2/payouts", payerTokA, map[string]string{
		"Fence-Grant": a.grant, "Fence-Status": e.kit.Status(a.vg, nil), "Fence-Segment": "1"}, payoutBody)
	wantCode(t, r, http.StatusForbidden, fencegate.CodeResourceMismatch)
	e.wantUnchanged(before)
}

func TestWorkerAuthorizationNeverReachesUpstream(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	wantPaid(t, e.payout(e.grantFor(payerA, payerTokA, 1), 1, payoutBody))
	got := e.seen[0]
	if got.Get("Authorization") != upSecret || e.pay.LeakedAuthorization() != 0 || e.pay.Unauthorized() != 0 {
		t.Fatalf("upstream saw Authorization %q", got.Get("Authorization"))
	}
	for name := range got {
		if strings.HasPrefix(name, "Fence-") {
			t.Errorf("upstream saw %s", name)
		}
	}
}

func TestOversizedBodyIsRefused(t *testing.T) {
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) { c.MaxBodyBytes = 16 })
	before := e.state()
	wantCode(t, e.payout(e.grantFor(payerA, payerTokA, 1), 1, payoutBody), http.StatusBadRequest, fencegate.CodeInvalidRequest)
	e.wantUnchanged(before)
}

func TestUpstreamDownIsBackendUnavailableAndSegmentReusable(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	wantPaid(t, e.payout(a, 1, payoutBody))
	addr := e.up.Listener.Addr().String()
	e.up.Close()
	before := e.state()
	wantCode(t, e.payout(a, 2, payoutBody), http.StatusServiceUnavailable, fencegate.CodeBackendUnavailable)
	after := e.state()
	if after.highest != before.highest || after.lastSeg != before.lastSeg || after.pending != "" || after.requests != before.requests {
		t.Fatalf("a call that never left changed the fence state: %+v -> %+v", before, after)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("cannot listen on %s again: %v", addr, err)
	}
	e.up = &httptest.Server{Listener: l, Config: &http.Server{Handler: http.HandlerFunc(e.record)}}
	e.up.Start()
	wantPaid(t, e.payout(a, 2, payoutBody))
	if e.pay.Effects() != 2 {
		t.Fatalf("effects = %d", e.pay.Effects())
	}
}

func TestNativeFenceUpstreamRejectsLowerFence(t *testing.T) {
	// Two gateways with separate fence stores front one native-fence upstream:
	// the upstream is the last line of defence against the lower fence.
	kit := prooftest.New(t)
	pay := upstream.New(upstream.Options{Credential: upSecret, FenceHeader: "Fence-Token", Now: kit.Now})
	native := func(c *httpapi.APIConfig) {
		c.Contract = httpapi.Contract{NativeFence: &httpapi.NativeFence{Header: "Fence-Token"}}
	}
	g1 := newAPIEnv(t, kit, pay, native)
	g2 := newAPIEnv(t, kit, pay, native)
	wantPaid(t, g1.payout(g1.grantFor(payerB, payerTokB, 2), 1, payoutBody))
	r := g2.payout(g2.grantFor(payerA, payerTokA, 1), 1, payoutBody)
	if r.status != http.StatusConflict || !strings.Contains(string(r.body), "stale_fence") {
		t.Fatalf("lower fence: %d %s", r.status, r.body)
	}
	if pay.Effects() != 1 || pay.StaleFences() != 1 || g1.seen[0].Get("Fence-Token") != "2" {
		t.Fatalf("effects %d, stale %d", pay.Effects(), pay.StaleFences())
	}
}

func TestDifferentPayloadUnderSameSegmentIsQuarantined(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	wantPaid(t, e.payout(a, 1, payoutBody))
	before := e.state()
	wantCode(t, e.payout(a, 1, `{"amount":999,"currency":"eur"}`), http.StatusConflict, fencegate.CodeQuarantined)
	e.wantUnchanged(before)

	// The refused call and the accepted one, side by side: the accepted
	// payload is the upstream request the receipt kept.
	var list fencegate.QuarantinePage
	if r := e.send("GET", "/v1/quarantine", a.token, nil, ""); r.status != http.StatusOK || json.Unmarshal(r.body, &list) != nil || len(list.Records) != 1 {
		t.Fatalf("quarantine list: %d %s", r.status, r.body)
	}
	var view struct {
		Quarantine      fencegate.Quarantine
		Accepted        fencegate.Receipt
		AcceptedPayload []byte
	}
	r := e.send("GET", "/v1/quarantine/"+list.Records[0].ID, a.token, nil, "")
	if r.status != http.StatusOK || json.Unmarshal(r.body, &view) != nil {
		t.Fatalf("quarantine view: %d %s", r.status, r.body)
	}
	if string(view.Quarantine.Payload) != `{"amount":999,"currency":"eur"}` || view.Accepted.Request == nil ||
		!bytes.Equal(view.AcceptedPayload, view.Accepted.Request.Body) || len(view.AcceptedPayload) == 0 {
		t.Fatalf("quarantine view = %s", r.body)
	}
	e.wantUnchanged(before)
}

func TestOperatorResolvesUnknownReceipt(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	e.pay.Inject(upstream.Reset)
	lost := e.payout(a, 1, payoutBody)
	wantCode(t, lost, http.StatusBadGateway, fencegate.CodeMutationUnknown)
	var p struct {
		ReceiptID string `json:"receiptId"`
	}
	_ = json.Unmarshal(lost.body, &p)
	path := "/v1/unknown/" + p.ReceiptID + "/resolve"
	// A workload credential is not an operator's.
	wantCode(t, e.send("POST", path, payerTokA, nil, `{"state":"NOT_APPLIED"}`), http.StatusForbidden, fencegate.CodeForbidden)
	wantCode(t, e.send("POST", path, "admin-token", nil, `{"state":"FAILED"}`), http.StatusBadRequest, fencegate.CodeInvalidRequest)
	// Past the reconcile deadline it waits for a person (before it, see
	// TestManualResolutionIsRefusedWhileTheReconcilerStillResends).
	e.kit.Advance(15 * time.Minute)
	r := e.send("POST", path, "admin-token", nil, `{"state":"NOT_APPLIED","note":"checked the provider dashboard"}`)
	var rc fencegate.Receipt
	if r.status != http.StatusOK || json.Unmarshal(r.body, &rc) != nil || rc.State != fencegate.ReceiptNotApplied || !strings.Contains(rc.Error, "ops") {
		t.Fatalf("resolve: %d %s", r.status, r.body)
	}
	// A final state never changes: a second verdict is RECEIPT_SETTLED.
	wantCode(t, e.send("POST", path, "admin-token", nil, `{"state":"COMMITTED"}`), http.StatusConflict, fencegate.CodeReceiptSettled)
	a = e.grantFor(payerA, payerTokA, 1)    // the same lease, its grant renewed
	wantPaid(t, e.payout(a, 1, payoutBody)) // the segment number was given back
	if e.pay.Effects() != 1 {
		t.Fatalf("effects = %d", e.pay.Effects())
	}
}

// lostPayout sends a payout whose answer is lost and returns its UNKNOWN receipt's resolve path.
func (e *apiEnv) lostPayout(a payer) (id, path string) {
	e.t.Helper()
	e.pay.Inject(upstream.Reset)
	lost := e.payout(a, 1, payoutBody)
	wantCode(e.t, lost, http.StatusBadGateway, fencegate.CodeMutationUnknown)
	var p struct {
		ReceiptID string `json:"receiptId"`
	}
	_ = json.Unmarshal(lost.body, &p)
	return p.ReceiptID, "/v1/unknown/" + p.ReceiptID + "/resolve"
}

func (e *apiEnv) receipt(id string) fencegate.Receipt {
	e.t.Helper()
	rc, err := e.store.Receipt(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return rc
}

// An UNKNOWN receipt the reconciler still resends (key retained, attempts
// left, before the deadline) is not the operator's to settle: a NOT_APPLIED
// by hand would make the resend's payment unrecordable. It is refused with
// STILL_RECONCILING and nothing changes; the resend then records the payment.
func TestManualResolutionIsRefusedWhileTheReconcilerStillResends(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	id, path := e.lostPayout(a)
	before, rcBefore := e.state(), e.receipt(id)
	for _, body := range []string{`{"state":"NOT_APPLIED"}`, `{"state":"COMMITTED"}`} {
		r := e.send("POST", path, "admin-token", nil, body)
		wantCode(t, r, http.StatusConflict, fencegate.CodeStillReconciling)
		if r.header.Get("Fence-Receipt") != id {
			t.Fatalf("refusal names receipt %q, want %s", r.header.Get("Fence-Receipt"), id)
		}
		e.wantUnchanged(before)
		if got := e.receipt(id); !reflect.DeepEqual(got, rcBefore) {
			t.Fatalf("refused resolution changed the receipt:\n%+v\n%+v", rcBefore, got)
		}
	}
	if n, err := e.rc.RunOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("reconcile: %d %v", n, err)
	}
	if got := e.receipt(id); got.State != fencegate.ReceiptCommitted {
		t.Fatalf("the resend's payment was not recorded: %+v", got)
	}
	if e.pay.Effects() != 1 {
		t.Fatalf("effects = %d", e.pay.Effects())
	}
}

// A receipt whose strategy has given up (here: every allowed send made)
// waits for a person before the deadline too.
func TestManualResolutionIsAcceptedOnceTheStrategyGaveUp(t *testing.T) {
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) { c.Settle.MaxAttempts = 1 })
	a := e.grantFor(payerA, payerTokA, 1)
	id, path := e.lostPayout(a)
	if !e.api.GaveUp(e.receipt(id)) {
		t.Fatalf("one send of one allowed: the strategy should have given up on %+v", e.receipt(id))
	}
	r := e.send("POST", path, "admin-token", nil, `{"state":"NOT_APPLIED","note":"checked"}`)
	if r.status != http.StatusOK || e.receipt(id).State != fencegate.ReceiptNotApplied {
		t.Fatalf("resolve after the strategy gave up: %d %s", r.status, r.body)
	}
}

// A route may bind a resource parameter to a forwarded header (a Stripe
// Connect platform's Stripe-Account): the account is then part of the
// call's resource, so the grant decides it. Another account is
// RESOURCE_MISMATCH with nothing sent upstream; a call without the header,
// or with a value that is no single segment, matches no route.
func TestAHeaderBoundAccountIsPartOfTheResource(t *testing.T) {
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) {
		c.ForwardHeaders = []string{"Stripe-Account"}
		c.Routes = []httpapi.Route{{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{connected}",
			Headers: map[string]string{"connected": "Stripe-Account"}}}
	})
	a := e.grantFor(payerA, payerTokA, 1) // payouts/acc_1
	call := func(seg int, account string) apiReply {
		h := map[string]string{"Fence-Grant": a.grant, "Fence-Status": e.kit.Status(a.vg, nil),
			"Fence-Segment": strconv.Itoa(seg), "Content-Type": "application/json"}
		if account != "" {
			h["Stripe-Account"] = account
		}
		return e.send("POST", payoutPath, a.token, h, payoutBody)
	}
	before := e.state()
	wantCode(t, call(1, "acc_2"), http.StatusForbidden, fencegate.CodeResourceMismatch)
	wantCode(t, call(1, ""), http.StatusNotFound, fencegate.CodeNotFound)
	wantCode(t, call(1, "acc_1/x"), http.StatusNotFound, fencegate.CodeNotFound)
	// The resource is derived from the headers the upstream is sent: one a
	// Connection header drops names no account.
	dropped := e.send("POST", payoutPath, a.token, map[string]string{"Fence-Grant": a.grant, "Fence-Status": e.kit.Status(a.vg, nil),
		"Fence-Segment": "1", "Content-Type": "application/json", "Stripe-Account": "acc_1", "Connection": "Stripe-Account"}, payoutBody)
	wantCode(t, dropped, http.StatusNotFound, fencegate.CodeNotFound)
	e.wantUnchanged(before)
	wantPaid(t, call(1, "acc_1"))
	if got := e.seen[len(e.seen)-1].Get("Stripe-Account"); got != "acc_1" || len(e.seen) != 1 {
		t.Fatalf("upstream saw %d calls, the last with Stripe-Account %q", len(e.seen), got)
	}
}

// A header a route binds reaches the upstream only inside the resource: not
// through a route on the same path that does not bind it (a platform's own
// route beside its Connect route), not as a second value, not with a value
// that is no plain segment. Each is refused before anything is sent.
func TestABoundHeaderNeverReachesTheUpstreamOutsideTheResource(t *testing.T) {
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) {
		c.ForwardHeaders = []string{"Stripe-Account"}
		c.Routes = []httpapi.Route{
			{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "connect/{connected}",
				Headers: map[string]string{"connected": "Stripe-Account"}},
			{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"}, // the platform's own
		}
	})
	a := e.grantFor(payerA, payerTokA, 1) // payouts/acc_1: the platform's route
	send := func(extra http.Header) apiReply {
		req := httptest.NewRequest("POST", "http://gw"+payoutPath, strings.NewReader(payoutBody))
		req.Header.Set("Authorization", "Bearer "+a.token)
		for k, v := range map[string]string{"Fence-Grant": a.grant, "Fence-Status": e.kit.Status(a.vg, nil),
			"Fence-Segment": "1", "Content-Type": "application/json"} {
			req.Header.Set(k, v)
		}
		for k, vs := range extra {
			req.Header[k] = vs
		}
		w := httptest.NewRecorder()
		e.h.ServeHTTP(w, req)
		var p struct{ Code string }
		_ = json.Unmarshal(w.Body.Bytes(), &p)
		return apiReply{status: w.Code, header: w.Header(), body: w.Body.Bytes(), code: p.Code}
	}
	before := e.state()
	for name, h := range map[string]http.Header{
		"another account":   {"Stripe-Account": {"acct_victim"}},
		"two values":        {"Stripe-Account": {"acc_1", "acct_victim"}},
		"not a plain value": {"Stripe-Account": {"acct_victim, acc_1"}},
	} {
		if r := send(h); r.status < 400 {
			t.Errorf("%s: %d %s, want a refusal", name, r.status, r.body)
		}
	}
	e.wantUnchanged(before)
	if len(e.seen) != 0 {
		t.Fatalf("the upstream was called %d times", len(e.seen))
	}
	// Without the header the platform's own route takes it.
	wantPaid(t, send(nil))
	if got := e.seen[0].Values("Stripe-Account"); len(got) != 0 {
		t.Fatalf("the platform's call carried Stripe-Account %q", got)
	}
}
