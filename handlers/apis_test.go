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
	target := fencegate.APITarget("payouts", "/v1/accounts/acc_1/payouts")
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
