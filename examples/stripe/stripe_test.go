package stripeexample

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/domain"
)

// gateway is the gateway binary, built from the main module, running
// `gateway dev` with a config fronting the fake Stripe.
type gateway struct {
	base string
	cmd  *exec.Cmd
	logs *bytes.Buffer
}

func startGateway(t *testing.T, upstream string) *gateway {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "gateway")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gateway")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`apis:
  - name: stripe
    preset: stripe
    baseURL: %s
    credentials: {env: STRIPE_SECRET_KEY}
    timeout: 5s
    routes:
      - {method: POST, path: /v1/payment_intents, resource: stripe/payment_intents}
      - {method: GET, path: "/v1/payment_intents/{intent}", resource: stripe/payment_intents}
`, upstream)), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	g := &gateway{base: "http://" + addr, logs: &bytes.Buffer{}}
	g.cmd = exec.Command(bin, "dev", "--config", cfg, "--data-dir", filepath.Join(dir, "data"), "--addr", addr,
		"--identity", "checkout-a=token-a", "--identity", "checkout-b=token-b")
	g.cmd.Env = append(os.Environ(), "STRIPE_SECRET_KEY=sk_test_gateway")
	g.cmd.Stdout, g.cmd.Stderr = g.logs, g.logs
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.cmd.Process.Signal(os.Interrupt)
		_ = g.cmd.Wait()
		if t.Failed() {
			t.Logf("gateway output:\n%s", g.logs)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(g.base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g
			}
		}
	}
	t.Fatalf("gateway did not become healthy:\n%s", g.logs)
	return nil
}

func quiet(c *stripe.BackendConfig) { c.LeveledLogger = &stripe.LeveledLogger{Level: stripe.LevelNull} }

func create(ctx context.Context, sc *stripe.Client, key string, amount int64, pm string) (*stripe.PaymentIntent, error) {
	p := &stripe.PaymentIntentCreateParams{Amount: stripe.Int64(amount), Currency: stripe.String(string(stripe.CurrencyEUR))}
	if pm != "" {
		p.PaymentMethod = stripe.String(pm)
	}
	p.SetIdempotencyKey(key)
	return sc.V1PaymentIntents.Create(ctx, p)
}

// TestStripeGoThroughTheGateway runs stripe-go, unmodified but for its HTTP
// client, through the gateway binary against a Stripe-like upstream, counting
// PaymentIntents created: the SDK never holds the secret; its retry after an
// answer lost after the effect creates nothing twice; a decline is the SDK's
// card error, saved under its key; reads need no grant; a restarted worker
// and the operation's next owner repeat a key without a second effect; a
// stale owner's create is refused with STALE_OWNER through the SDK's error.
func TestStripeGoThroughTheGateway(t *testing.T) {
	up := newFakeStripe("sk_test_gateway")
	srv := httptest.NewServer(up)
	defer srv.Close()
	gw := startGateway(t, srv.URL)
	ctx := context.Background()
	params := func(req string) client.LeaseParams {
		return client.LeaseParams{AcquireParams: client.AcquireParams{Resource: "stripe/payment_intents",
			RequestID: req, TTL: time.Minute, OperationID: "checkout-42"}}
	}
	worker := func(token, req string) (*client.Lease, *stripe.Client) {
		l, err := client.New(gw.base, token).AcquireLease(ctx, params(req))
		if err != nil {
			t.Fatal(err)
		}
		return l, NewClient(l, "stripe", quiet)
	}

	_, sc := worker("token-a", "a-1")
	pi, err := create(ctx, sc, "order-42-pay", 1000, "")
	if err != nil || pi.ID != "pi_1" || pi.Amount != 1000 {
		t.Fatalf("create: %+v %v", pi, err)
	}
	for i, auth := range up.authSeen {
		if auth != "Bearer sk_test_gateway" {
			t.Fatalf("upstream request %d carried %q, not the gateway's secret", i, auth)
		}
	}
	if k := up.keysSeen[0]; k == "order-42-pay" || !strings.HasPrefix(k, "fg") {
		t.Fatalf("upstream key %q: want the gateway's deterministic key, not the SDK's", k)
	}
	if v := up.versions[0]; v != stripe.APIVersion { // the preset forwards Stripe-Version
		t.Fatalf("upstream saw Stripe-Version %q, the SDK sent %q", v, stripe.APIVersion)
	}

	// The SDK's own retry under its key (here: the same call again) is a replay.
	if again, err := create(ctx, sc, "order-42-pay", 1000, ""); err != nil || again.ID != pi.ID {
		t.Fatalf("repeat: %+v %v", again, err)
	}

	// Stripe applies the next create and the answer is lost: the gateway
	// resends under the same key, Stripe answers the saved result, and the
	// SDK (retrying on its own, under its key) gets that one PaymentIntent.
	up.dropAfterEffect()
	lost, err := create(ctx, sc, "order-43-pay", 500, "")
	if err != nil {
		var fe *domain.Error
		if !errors.As(err, &fe) || fe.Code != domain.CodeMutationUnknown {
			t.Fatalf("create after a lost answer: %v", err)
		}
		if lost, err = create(ctx, sc, "order-43-pay", 500, ""); err != nil {
			t.Fatalf("create after a lost answer, again: %v", err)
		}
	}
	if lost.ID != "pi_2" || up.effects() != 2 {
		t.Fatalf("after a lost answer: %+v, %d PaymentIntents (want pi_2, 2)", lost, up.effects())
	}

	// A decline is Stripe's answer, saved under the key: the SDK reports its card error.
	_, err = create(ctx, sc, "order-44-pay", 700, "pm_card_chargeDeclined")
	var se *stripe.Error
	if !errors.As(err, &se) || se.Code != stripe.ErrorCodeCardDeclined || se.HTTPStatusCode != http.StatusPaymentRequired {
		t.Fatalf("declined create: %v", err)
	}

	// A read through the gateway's read route.
	got, err := sc.V1PaymentIntents.Retrieve(ctx, pi.ID, nil)
	if err != nil || got.ID != pi.ID || got.Amount != 1000 {
		t.Fatalf("retrieve: %+v %v", got, err)
	}
	if _, err := sc.V1PaymentIntents.Retrieve(ctx, "pi_nope", nil); !errors.As(err, &se) || se.Code != stripe.ErrorCodeResourceMissing {
		t.Fatalf("retrieve of a missing intent: %v", err)
	}

	// The worker restarts: same lease (same request ID), a new SDK client.
	requests := up.requestCount()
	lease2, sc2 := worker("token-a", "a-1")
	if again, err := create(ctx, sc2, "order-42-pay", 1000, ""); err != nil || again.ID != pi.ID {
		t.Fatalf("restarted worker: %+v %v", again, err)
	}
	if up.requestCount() != requests {
		t.Fatal("a committed key went upstream again after a restart")
	}
	if err := lease2.Release(ctx); err != nil { // the first object still believes it holds the lease
		t.Fatal(err)
	}

	// The operation's next owner repeats a committed key: answered from the receipt.
	_, scb := worker("token-b", "b-1")
	if again, err := create(ctx, scb, "order-43-pay", 500, ""); err != nil || again.ID != lost.ID {
		t.Fatalf("next owner, committed key: %+v %v", again, err)
	}
	if next, err := create(ctx, scb, "order-45-pay", 900, ""); err != nil || next.ID != "pi_3" {
		t.Fatalf("next owner, new key: %+v %v", next, err)
	}

	// The first worker's late create is refused; the SDK returns the refusal
	// (stripe-go retries it, and the lease, lost on the first answer, refuses
	// the retries locally, naming the gateway's STALE_OWNER).
	_, err = create(ctx, sc, "order-46-pay", 100, "")
	if !hasCode(err, domain.CodeStaleOwner) {
		t.Fatalf("stale owner's create: %v", err)
	}
	if up.effects() != 3 {
		t.Fatalf("%d PaymentIntents, want 3", up.effects())
	}
}

// hasCode reports whether any *domain.Error in err's chain has code.
func hasCode(err error, code domain.Code) bool {
	for err != nil {
		var fe *domain.Error
		if !errors.As(err, &fe) {
			return false
		}
		if fe.Code == code {
			return true
		}
		err = fe.Err
	}
	return false
}
