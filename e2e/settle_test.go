package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/e2e/upstream"
)

// TestShippedPayoutsExampleSettlesFaultsAfterTheEffectByTheirContract runs
// deploy/gateway.payouts.yaml (its baseURL pointed at a fake provider) plus a
// Square-like API that takes a 45-character key in the JSON body, through
// the built binary, with faults injected after the effect. It counts real
// payouts and reads receipts: no payout is made twice, none is reported
// COMMITTED that did not happen, none NOT_APPLIED that did.
func TestShippedPayoutsExampleSettlesFaultsAfterTheEffectByTheirContract(t *testing.T) {
	pay := upstream.New(upstream.Options{Credential: "Bearer sk_live_gateway"})
	srv := pay.Start()
	defer srv.Close()
	sq := upstream.New(upstream.Options{Credential: "Bearer sq_gateway", KeyField: "idempotency_key", MaxKeyLength: 45})
	sqSrv := sq.Start()
	defer sqSrv.Close()

	shipped, err := os.ReadFile(filepath.Join("..", "deploy", "gateway.payouts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yml := strings.Replace(string(shipped), "http://127.0.0.1:9090", srv.URL, 1)
	yml = strings.Replace(yml, "reconcile:", fmt.Sprintf(`  - name: squarelike
    baseURL: %s
    credentials: {prefix: "Bearer ", env: SQ_TOKEN}
    timeout: 5s
    key: {bodyField: /idempotency_key, maxLength: 45}
    contract:
      idempotency: {keyRetention: 24h}
    routes:
      - {method: POST, path: "/v1/accounts/{account}/payouts", resource: "sq/{account}"}
reconcile:`, sqSrv.URL), 1)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	maddr := freePort(t)
	p := startGatewayEnv(t, []string{"PAYOUTS_TOKEN=sk_live_gateway", "SQ_TOKEN=sq_gateway"}, "dev", "--config", cfg,
		"--data-dir", filepath.Join(dir, "data"), "--identity", "worker-a=token-a", "--metrics-addr", maddr)

	call := func(api string, l lease, seg int, body string) answer {
		h := fenceHeaders(l, seg)
		h["Content-Type"] = "application/json"
		return p.do(t, "POST", "/v1/apis/"+api+"/v1/accounts/acc_1/payouts", "token-a", h, body)
	}
	receipt := func(id string) map[string]any {
		a := p.do(t, "GET", "/v1/receipts?operationId=payroll-9", "token-a", nil, "")
		var list struct {
			Receipts []map[string]any `json:"receipts"`
		}
		if err := json.Unmarshal(a.body, &list); err != nil {
			t.Fatalf("receipts: %s", a.body)
		}
		for _, r := range list.Receipts {
			if r["receiptId"] == id {
				return r
			}
		}
		t.Fatalf("no receipt %s in %s", id, a.body)
		return nil
	}
	settled := func(a answer, state string, attempts float64) {
		t.Helper()
		r := receipt(a.header.Get("Fence-Receipt") + a.str("receiptId"))
		if r["state"] != state || r["attempts"] != attempts {
			t.Fatalf("receipt %v: state %v attempts %v, want %s %v", r["receiptId"], r["state"], r["attempts"], state, attempts)
		}
	}
	l := p.acquire(t, "token-a", "payouts/acc_1", "a-1", "payroll-9", 30000)

	// Segment 1: paid, answer dropped. The replay resends under the same key
	// and answers the saved payout.
	pay.Inject(upstream.DropResponse)
	wantCode(t, call("payouts", l, 1, `{"amount":100,"currency":"eur"}`), http.StatusBadGateway, "MUTATION_UNKNOWN")
	first := call("payouts", l, 1, `{"amount":100,"currency":"eur"}`)
	if first.status != http.StatusOK || first.header.Get("Fence-Replay") != "true" || pay.Effects() != 1 {
		t.Fatalf("replay after a drop: %d %s, payouts %d", first.status, first.body, pay.Effects())
	}
	settled(first, "COMMITTED", 2)

	// Segment 2: the provider says the key is in progress (409, Retry-After:
	// 2): never stored as the answer. A replay before the provider's wait is
	// over is MUTATION_UNKNOWN with that wait and sends nothing; after it,
	// the replay resends under the same key.
	pay.Inject(upstream.InProgress)
	wantCode(t, call("payouts", l, 2, `{"amount":200,"currency":"eur"}`), http.StatusBadGateway, "MUTATION_UNKNOWN")
	early := call("payouts", l, 2, `{"amount":200,"currency":"eur"}`)
	wantCode(t, early, http.StatusBadGateway, "MUTATION_UNKNOWN")
	wait, err := strconv.Atoi(early.header.Get("Retry-After"))
	if err != nil || wait < 1 || wait > 2 || pay.Effects() != 1 {
		t.Fatalf("replay inside the provider's Retry-After: Retry-After %q, payouts %d", early.header.Get("Retry-After"), pay.Effects())
	}
	time.Sleep(time.Duration(wait)*time.Second + 200*time.Millisecond) // the provider's own wait, on the binary's clock
	second := call("payouts", l, 2, `{"amount":200,"currency":"eur"}`)
	if second.status != http.StatusOK || pay.Effects() != 2 {
		t.Fatalf("replay after in-progress: %d %s, payouts %d", second.status, second.body, pay.Effects())
	}
	settled(second, "COMMITTED", 2)

	// Segment 3: 503 before anything was paid. The resend pays once, and the
	// stored answer is that payout (the old example stored a search's empty
	// list as the answer of a payout never made).
	pay.Inject(upstream.Unavailable)
	wantCode(t, call("payouts", l, 3, `{"amount":400,"currency":"eur"}`), http.StatusBadGateway, "MUTATION_UNKNOWN")
	third := call("payouts", l, 3, `{"amount":400,"currency":"eur"}`)
	var po upstream.Payout
	if third.status != http.StatusOK || json.Unmarshal(third.body, &po) != nil || po.Amount != 400 || pay.Effects() != 3 {
		t.Fatalf("replay after a 503: %d %s, payouts %d", third.status, third.body, pay.Effects())
	}
	settled(third, "COMMITTED", 2)

	// Segment 4 (last: it leaves the resource UNKNOWN): paid, and answered
	// with a 500 the provider saved under the key. Not resent (a resend
	// returns the same 500), not guessed: UNKNOWN.
	pay.Inject(upstream.SavedServerError)
	lost := call("payouts", l, 4, `{"amount":300,"currency":"eur"}`)
	wantCode(t, lost, http.StatusBadGateway, "MUTATION_UNKNOWN")
	requests := pay.Requests()
	wantCode(t, call("payouts", l, 4, `{"amount":300,"currency":"eur"}`), http.StatusBadGateway, "MUTATION_UNKNOWN")
	if pay.Requests() != requests || pay.Effects() != 4 {
		t.Fatalf("a saved 500 was resent: requests %d -> %d, payouts %d", requests, pay.Requests(), pay.Effects())
	}
	if r := receipt(lost.str("receiptId")); r["state"] != "UNKNOWN" || r["resend"] == true {
		t.Fatalf("saved 500 receipt: %v", r)
	}

	// The Square-like API: the connection drops after the payout; the key
	// travels in the body, 45 characters long; the replay settles it.
	sqLease := p.acquire(t, "token-a", "sq/acc_1", "a-2", "payroll-9", 30000)
	sq.Inject(upstream.DropResponse)
	body := `{"amount":400,"currency":"eur","idempotency_key":"sdk-chosen"}`
	wantCode(t, call("squarelike", sqLease, 1, body), http.StatusBadGateway, "MUTATION_UNKNOWN")
	sqAns := call("squarelike", sqLease, 1, body)
	if sqAns.status != http.StatusOK || sq.Effects() != 1 {
		t.Fatalf("square-like replay: %d %s, payouts %d", sqAns.status, sqAns.body, sq.Effects())
	}
	if k := sq.Payouts()[0].IdempotencyKey; len(k) != 45 || !strings.HasPrefix(k, "fg-") {
		t.Fatalf("the body key is %q", k)
	}
	settled(sqAns, "COMMITTED", 2)

	// Every resend is counted and logged: at least the three replays of
	// payouts (the reconciler may have made some of them first) and one of
	// the Square-like API.
	m := (&gatewayProc{base: "http://" + maddr}).do(t, "GET", "/metrics", "", nil, "")
	for api, least := range map[string]int{"payouts": 3, "squarelike": 1} {
		re := regexp.MustCompile(`fencegate_upstream_resends_total\{api="` + api + `",reason="unknown"\} (\d+)`)
		got := re.FindStringSubmatch(string(m.body))
		if got == nil {
			got = []string{"", "0"}
		}
		if n, _ := strconv.Atoi(got[1]); n < least {
			t.Fatalf("resends of %s not counted (want >= %d):\n%.3000s", api, least, m.body)
		}
	}
	if !strings.Contains(p.logs.String(), "resending an upstream request under its idempotency key") {
		t.Fatal("resends are not logged")
	}
	if pay.Effects() != 4 || sq.Effects() != 1 || pay.LeakedAuthorization() != 0 {
		t.Fatalf("payouts %d and %d (want 4 and 1), leaked credentials %d", pay.Effects(), sq.Effects(), pay.LeakedAuthorization())
	}
}
