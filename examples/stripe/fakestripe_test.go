package stripeexample

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fakeStripe is a Stripe-like upstream for PaymentIntents that keeps
// Stripe's documented idempotency (https://docs.stripe.com/api/idempotent_requests,
// https://docs.stripe.com/idempotency):
//
//   - a POST's Idempotency-Key (at most 255 characters) saves the status code
//     and body of the first request once the endpoint begins executing,
//     whether it succeeds or fails (a 402 decline included), and later
//     requests with the key get that saved answer;
//   - the same key with other parameters is an idempotency_error (400);
//   - a request that fails parameter validation saves nothing and may be
//     retried (requests with one key are served one at a time here, so the
//     documented 409 for a key still executing does not arise);
//   - keys may be pruned once they are 24 hours old;
//   - errors are {"error": {"type", "code", "message"}}
//     (https://docs.stripe.com/api/errors); a missing object is 404
//     resource_missing.
//
// It counts real effects (PaymentIntents created) and can drop the answer
// of the next create after applying it, the fault an SDK cannot tell from a
// request that never arrived.
type fakeStripe struct {
	secret string

	mu        sync.Mutex
	intents   map[string]map[string]any
	order     []string
	keys      map[string]*savedAnswer
	dropNext  int
	requests  int
	authSeen  []string
	keysSeen  []string
	versions  []string // Stripe-Version of each request
	retention time.Duration
	now       func() time.Time
}

type savedAnswer struct {
	params string // canonical form of the parameters
	status int
	body   []byte
	at     time.Time
}

func newFakeStripe(secret string) *fakeStripe {
	return &fakeStripe{secret: secret, intents: map[string]map[string]any{}, keys: map[string]*savedAnswer{},
		retention: 24 * time.Hour, now: time.Now}
}

// effects is the number of PaymentIntents created (declines create none).
func (f *fakeStripe) effects() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.order) }

func (f *fakeStripe) requestCount() int { f.mu.Lock(); defer f.mu.Unlock(); return f.requests }

// dropAfterEffect makes the next create apply, then hang up without answering.
func (f *fakeStripe) dropAfterEffect() { f.mu.Lock(); f.dropNext++; f.mu.Unlock() }

func (f *fakeStripe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests++
	f.authSeen = append(f.authSeen, r.Header.Get("Authorization"))
	f.versions = append(f.versions, r.Header.Get("Stripe-Version"))
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		f.keysSeen = append(f.keysSeen, k)
	}
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+f.secret {
		stripeError(w, http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided")
		return
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents":
		f.create(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/payment_intents/"):
		f.retrieve(w, strings.TrimPrefix(r.URL.Path, "/v1/payment_intents/"))
	default:
		stripeError(w, http.StatusNotFound, "invalid_request_error", "resource_missing", "Unrecognized request URL")
	}
}

func (f *fakeStripe) create(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	form, err := url.ParseQuery(string(raw))
	if err != nil {
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_invalid", "malformed form body")
		return
	}
	amount, err := strconv.ParseInt(form.Get("amount"), 10, 64)
	if err != nil || amount <= 0 || form.Get("currency") == "" {
		// Validation fails before execution begins: nothing is saved.
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "parameter_missing", "amount and currency are required")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 255 {
		stripeError(w, http.StatusBadRequest, "invalid_request_error", "", "idempotency keys are at most 255 characters")
		return
	}
	params := canonical(form)
	f.mu.Lock()
	if s := f.keys[key]; key != "" && s != nil && f.now().Sub(s.at) >= f.retention {
		delete(f.keys, key) // pruned: the key is new again
	}
	if s := f.keys[key]; key != "" && s != nil {
		f.mu.Unlock()
		if s.params != params {
			stripeError(w, http.StatusBadRequest, "idempotency_error", "",
				"Keys for idempotent requests can only be used with the same parameters they were first used with.")
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, s.status, s.body)
		return
	}
	status, body := f.execute(form, amount)
	if key != "" {
		f.keys[key] = &savedAnswer{params: params, status: status, body: body, at: f.now()}
	}
	drop := f.dropNext > 0
	if drop {
		f.dropNext--
	}
	f.mu.Unlock()
	if drop {
		hangUp(w)
		return
	}
	writeJSON(w, status, body)
}

// execute runs the endpoint (f.mu held): the test card
// pm_card_chargeDeclined is declined with 402 card_declined and creates
// nothing; any other request creates a PaymentIntent.
func (f *fakeStripe) execute(form url.Values, amount int64) (int, []byte) {
	if form.Get("payment_method") == "pm_card_chargeDeclined" {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"type": "card_error", "code": "card_declined",
			"decline_code": "generic_decline", "message": "Your card was declined."}})
		return http.StatusPaymentRequired, b
	}
	id := fmt.Sprintf("pi_%d", len(f.order)+1)
	pi := map[string]any{"id": id, "object": "payment_intent", "amount": amount, "currency": form.Get("currency"),
		"status": "requires_payment_method"}
	f.intents[id] = pi
	f.order = append(f.order, id)
	b, _ := json.Marshal(pi)
	return http.StatusOK, b
}

func (f *fakeStripe) retrieve(w http.ResponseWriter, id string) {
	f.mu.Lock()
	pi, ok := f.intents[id]
	f.mu.Unlock()
	if !ok {
		stripeError(w, http.StatusNotFound, "invalid_request_error", "resource_missing", "No such payment_intent: '"+id+"'")
		return
	}
	b, _ := json.Marshal(pi)
	writeJSON(w, http.StatusOK, b)
}

// canonical orders a form's parameters so equal parameter sets compare equal.
func canonical(form url.Values) string {
	keys := make([]string, 0, len(form))
	for k := range form {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s=%q;", k, form[k])
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func stripeError(w http.ResponseWriter, status int, typ, code, msg string) {
	e := map[string]any{"type": typ, "message": msg}
	if code != "" {
		e["code"] = code
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_"+strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
