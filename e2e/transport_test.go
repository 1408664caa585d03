package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/e2e/upstream"
)

// sdkCall is what an SDK does: a plain net/http request to the API's own
// base URL with its own secret and idempotency key, on the client it was given.
func sdkCall(t *testing.T, hc *http.Client, method, path, key, body string) (*http.Response, []byte, error) {
	t.Helper()
	req, err := http.NewRequest(method, "https://payments.example.com"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk_live_the_sdk_never_needs_this")
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// TestTransportGivesAnSDKOneSegmentPerKeyAcrossRestartsAndOwners: an SDK on
// client.Transport pays through the binary; a retry under its key is a
// replay; a restarted worker (same lease) and a new owner (higher fence,
// same operation) find the key in the receipt ledger and pay nothing twice;
// reads need no grant; a stale owner's call fails with STALE_OWNER.
func TestTransportGivesAnSDKOneSegmentPerKeyAcrossRestartsAndOwners(t *testing.T) {
	pay := upstream.New(upstream.Options{Credential: "Bearer sk_live_gateway"})
	srv := pay.Start()
	defer srv.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`apis:
  - name: payouts
    baseURL: %s
    credentials: {prefix: "Bearer ", env: PAYOUTS_TOKEN}
    contract:
      idempotency:
        keyRetention: 24h
    routes:
      - {method: POST, path: "/v1/accounts/{account}/payouts", resource: "payouts/{account}"}
      - {method: GET, path: "/v1/payouts", resource: "payouts/acc_1"}
`, srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startGatewayEnv(t, []string{"PAYOUTS_TOKEN=sk_live_gateway"}, "dev", "--config", cfg,
		"--data-dir", filepath.Join(dir, "data"), "--identity", "worker-a=token-a", "--identity", "worker-b=token-b")
	ctx := context.Background()
	params := func(req string) client.LeaseParams {
		return client.LeaseParams{AcquireParams: client.AcquireParams{Resource: "payouts/acc_1", RequestID: req,
			TTL: 30 * time.Second, OperationID: "payroll-9"}}
	}
	worker := func(token, req string) (*client.Lease, *http.Client) {
		l, err := client.New(p.base, token).AcquireLease(ctx, params(req))
		if err != nil {
			t.Fatal(err)
		}
		return l, &http.Client{Transport: &client.Transport{Lease: l, API: "payouts"}}
	}
	const path = "/v1/accounts/acc_1/payouts"
	pay1 := `{"amount":100,"currency":"eur"}`

	a, hc := worker("token-a", "a-1")
	resp, first, err := sdkCall(t, hc, "POST", path, "order-1", pay1)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Fence-Receipt") == "" {
		t.Fatalf("first payout: %v %v %s", err, resp, first)
	}
	resp, again, err := sdkCall(t, hc, "POST", path, "order-1", pay1)
	if err != nil || string(again) != string(first) || resp.Header.Get("Fence-Replay") != "true" {
		t.Fatalf("SDK retry under its key: %v %s (first %s)", err, again, first)
	}

	// The worker restarts: a new process re-acquires the same lease.
	a2, hc2 := worker("token-a", "a-1")
	if a2.ID() != a.ID() || a2.Fence() != a.Fence() {
		t.Fatal("the same request ID did not give back the same lease")
	}
	if _, b, err := sdkCall(t, hc2, "POST", path, "order-1", pay1); err != nil || string(b) != string(first) {
		t.Fatalf("restarted worker, same key: %v %s", err, b)
	}
	if resp, b, err := sdkCall(t, hc2, "POST", path, "order-2", `{"amount":200,"currency":"eur"}`); err != nil || resp.StatusCode != 200 {
		t.Fatalf("restarted worker, new key: %v %s", err, b)
	}
	if pay.Effects() != 2 {
		t.Fatalf("effects = %d after two keys, want 2", pay.Effects())
	}

	// A new owner of the operation (higher fence) repeats order-1: answered from the ledger.
	if err := a2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, hcb := worker("token-b", "b-1")
	requests := pay.Requests()
	if _, body, err := sdkCall(t, hcb, "POST", path, "order-1", pay1); err != nil || string(body) != string(first) {
		t.Fatalf("new owner, committed key: %v %s", err, body)
	}
	if pay.Requests() != requests {
		t.Fatal("a key committed by an earlier owner was sent upstream again")
	}
	if _, body, err := sdkCall(t, hcb, "POST", path, "order-3", `{"amount":300,"currency":"eur"}`); err != nil {
		t.Fatalf("new owner, new key: %v %s", err, body)
	}
	if pay.Effects() != 3 || pay.LeakedAuthorization() != 0 {
		t.Fatalf("effects %d (want 3), leaked SDK credentials %d", pay.Effects(), pay.LeakedAuthorization())
	}

	// A read through the transport: no grant, the gateway's credential.
	var po upstream.Payout
	if err := json.Unmarshal(first, &po); err != nil {
		t.Fatal(err)
	}
	resp, body, err := sdkCall(t, hcb, "GET", "/v1/payouts?idempotency_key="+po.IdempotencyKey, "", "")
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), po.ID) {
		t.Fatalf("read: %v %s", err, body)
	}

	// The old owner's late call is refused; the SDK gets an error with the code.
	_, _, err = sdkCall(t, hc, "POST", path, "order-4", `{"amount":400,"currency":"eur"}`)
	var fe *fencegate.Error
	if !errors.As(err, &fe) || fe.Code != fencegate.CodeStaleOwner {
		t.Fatalf("stale owner's call: %v, want STALE_OWNER", err)
	}
	if pay.Effects() != 3 {
		t.Fatalf("effects = %d after a stale call, want 3", pay.Effects())
	}
}
