package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/e2e/upstream"
)

// payoutsGateway starts `gateway dev --config` with one API, payouts, in
// front of the upstream at url: its credentials (a YAML flow map) and its
// further fields and routes (YAML lines indented under the API) are the
// caller's; env is the process's environment beyond the test's, args are
// added to worker-a's identity.
func payoutsGateway(t *testing.T, url, credentials, more string, env []string, args ...string) *gatewayProc {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	yml := fmt.Sprintf(`apis:
  - name: payouts
    baseURL: %s
    credentials: %s
    timeout: 5s
    contract:
      idempotency:
        keyRetention: 24h%s
`, url, credentials, more)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return startGatewayEnv(t, env, append([]string{"dev", "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
		"--identity", "worker-a=token-a"}, args...)...)
}

// TestPayoutFlowThroughTheBinary runs a payout flow through `gateway dev
// --config` against a payments upstream: the gateway injects the upstream
// credential, a replay returns the stored answer without paying again, and
// the old owner never pays after the new owner's first call.
func TestPayoutFlowThroughTheBinary(t *testing.T) {
	pay := upstream.New(upstream.Options{Credential: "Bearer sk_live_gateway"})
	srv := pay.Start()
	defer srv.Close()
	p := payoutsGateway(t, srv.URL, `{header: Authorization, prefix: "Bearer ", env: PAYOUTS_TOKEN}`, `
    routes:
      - {method: POST, path: "/v1/accounts/{account}/payouts", resource: "payouts/{account}"}
      - {method: GET, path: "/v1/payouts", resource: "payouts/acc_1"}`,
		[]string{"PAYOUTS_TOKEN=sk_live_gateway"}, "--identity", "worker-b=token-b")

	call := func(token string, l lease, seg int, body string) answer {
		return p.do(t, "POST", "/v1/apis/payouts/v1/accounts/acc_1/payouts", token, map[string]string{
			"Authorization": "Bearer " + token, "Content-Type": "application/json",
			"Fence-Grant": l.grant, "Fence-Status": l.status, "Fence-Segment": fmt.Sprint(seg)}, body)
	}
	a := p.acquire(t, "token-a", "payouts/acc_1", "a-1", "payroll-7", 500)
	first := call("token-a", a, 1, `{"amount":100,"currency":"eur"}`)
	if first.status >= 300 || first.header.Get("Fence-Receipt") == "" {
		t.Fatalf("payout: %d %s", first.status, first.body)
	}
	again := call("token-a", a, 1, `{"amount":100,"currency":"eur"}`)
	if again.status != first.status || string(again.body) != string(first.body) || again.header.Get("Fence-Replay") != "true" {
		t.Fatalf("replay: %d %s (first %d %s)", again.status, again.body, first.status, first.body)
	}
	time.Sleep(700 * time.Millisecond) // A pauses past its TTL
	b := p.acquire(t, "token-b", "payouts/acc_1", "b-1", "payroll-7", 30000)
	if r := call("token-b", b, 1, `{"amount":200,"currency":"eur"}`); r.status >= 300 {
		t.Fatalf("B payout: %d %s", r.status, r.body)
	}
	late := call("token-a", a, 2, `{"amount":300,"currency":"eur"}`)
	wantCode(t, late, http.StatusConflict, "STALE_OWNER")
	// A read needs no grant: the gateway's credential finds the first payout.
	var po upstream.Payout
	if err := json.Unmarshal(first.body, &po); err != nil {
		t.Fatal(err)
	}
	read := p.do(t, "GET", "/v1/apis/payouts/v1/payouts?idempotency_key="+po.IdempotencyKey, "token-b", nil, "")
	if read.status != http.StatusOK || read.str("id") != po.ID || read.header.Get("Fence-Receipt") != "" {
		t.Fatalf("read through the gateway: %d %s", read.status, read.body)
	}
	if pay.Effects() != 2 || pay.LeakedAuthorization() != 0 {
		t.Fatalf("upstream effects %d (want 2), leaked worker credentials %d", pay.Effects(), pay.LeakedAuthorization())
	}
}

// TestARefusedCredentialPaysNothingAndTheSegmentGoesAgain runs through the
// binary with the upstream credential in a file holding the wrong token:
// the upstream answers 401, the worker is told BACKEND_UNAVAILABLE, the
// receipt is FAILED (no stored 401 a replay would repeat) and the resource
// has nothing in flight. The operator renews the file; the same segment,
// sent again, is paid once, with the new token and no restart.
func TestARefusedCredentialPaysNothingAndTheSegmentGoesAgain(t *testing.T) {
	pay := upstream.New(upstream.Options{Credential: "Bearer sk_live_renewed"})
	srv := pay.Start()
	defer srv.Close()
	dir := t.TempDir()
	token := filepath.Join(dir, "payouts-token")
	if err := os.WriteFile(token, []byte("sk_live_expired\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := payoutsGateway(t, srv.URL, fmt.Sprintf(`{header: Authorization, prefix: "Bearer ", file: %s}`, token), `
    routes:
      - {method: POST, path: "/v1/accounts/{account}/payouts", resource: "payouts/{account}"}`, nil)
	a := p.acquire(t, "token-a", "payouts/acc_1", "a-1", "payroll-8", 30000)
	call := func() answer {
		return p.do(t, "POST", "/v1/apis/payouts/v1/accounts/acc_1/payouts", "token-a", map[string]string{
			"Content-Type": "application/json", "Fence-Grant": a.grant, "Fence-Status": a.status, "Fence-Segment": "1"},
			`{"amount":100,"currency":"eur"}`)
	}
	wantCode(t, call(), http.StatusServiceUnavailable, "BACKEND_UNAVAILABLE")
	var list struct {
		Receipts []struct{ State string }
	}
	r := p.do(t, "GET", "/v1/receipts?operationId=payroll-8", "token-a", nil, "")
	if err := json.Unmarshal(r.body, &list); err != nil || len(list.Receipts) != 1 || list.Receipts[0].State != "FAILED" {
		t.Fatalf("receipts after the refusal: %d %s", r.status, r.body)
	}
	if res := p.do(t, "GET", "/v1/resources/payouts/acc_1", "token-a", nil, ""); res.str("pendingReceipt") != "" {
		t.Fatalf("resource after the refusal: %s", res.body)
	}
	if err := os.WriteFile(token, []byte("sk_live_renewed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if paid := call(); paid.status != http.StatusOK || paid.header.Get("Fence-Replay") != "" {
		t.Fatalf("the segment sent again: %d %s", paid.status, paid.body)
	}
	if pay.Effects() != 1 || pay.Unauthorized() != 1 {
		t.Fatalf("upstream effects %d (want 1), refused %d (want 1)", pay.Effects(), pay.Unauthorized())
	}
}

// TestAHeaderBoundAccountThroughTheBinary: a route declared in the config
// file with headers: {account: Stripe-Account} makes the account part of
// the resource. A worker holding a lease on connect/acct_1 is refused
// RESOURCE_MISMATCH for acct_2 and for a second value, and nothing is paid;
// with acct_1 it pays once, and a lease on connect/acct_2 then pays acct_2
// on the same path.
func TestAHeaderBoundAccountThroughTheBinary(t *testing.T) {
	pay := upstream.New(upstream.Options{Credential: "Bearer sk_live_gateway"})
	srv := pay.Start()
	defer srv.Close()
	p := payoutsGateway(t, srv.URL, `{header: Authorization, prefix: "Bearer ", env: PAYOUTS_TOKEN}`, `
    forwardHeaders: [Stripe-Account]
    routes:
      - {method: POST, path: "/v1/accounts/{acct}/payouts", resource: "connect/{account}", headers: {account: Stripe-Account}}`,
		[]string{"PAYOUTS_TOKEN=sk_live_gateway"})
	a := p.acquire(t, "token-a", "connect/acct_1", "a-1", "connect-1", 30000)
	call := func(account string) answer {
		return p.do(t, "POST", "/v1/apis/payouts/v1/accounts/acc_1/payouts", "token-a", map[string]string{
			"Content-Type": "application/json", "Fence-Grant": a.grant, "Fence-Status": a.status, "Fence-Segment": "1",
			"Stripe-Account": account}, `{"amount":100,"currency":"eur"}`)
	}
	wantCode(t, call("acct_2"), http.StatusForbidden, "RESOURCE_MISMATCH")
	wantCode(t, call("acct_1, acct_2"), http.StatusNotFound, "NOT_FOUND")
	if res := p.do(t, "GET", "/v1/resources/connect/acct_1", "token-a", nil, ""); res.num("highestFence") != 0 || pay.Effects() != 0 {
		t.Fatalf("refused calls moved the resource (%d %s) or paid (%d)", res.status, res.body, pay.Effects())
	}
	if paid := call("acct_1"); paid.status != http.StatusOK {
		t.Fatalf("acct_1: %d %s", paid.status, paid.body)
	}
	if pay.Effects() != 1 {
		t.Fatalf("upstream effects %d, want 1", pay.Effects())
	}
	// Another account, under its own lease, on the same path: a target of
	// its own, so it pays too (the path alone was acct_1's for good).
	b := p.acquire(t, "token-a", "connect/acct_2", "a-2", "connect-2", 30000)
	paid := p.do(t, "POST", "/v1/apis/payouts/v1/accounts/acc_1/payouts", "token-a", map[string]string{
		"Content-Type": "application/json", "Fence-Grant": b.grant, "Fence-Status": b.status, "Fence-Segment": "1",
		"Stripe-Account": "acct_2"}, `{"amount":100,"currency":"eur"}`)
	if paid.status != http.StatusOK || pay.Effects() != 2 {
		t.Fatalf("acct_2 under its own lease: %d %s, upstream effects %d (want 2)", paid.status, paid.body, pay.Effects())
	}
}
