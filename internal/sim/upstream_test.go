package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// upstream is a payments API in memory, behaving as Stripe documents
// idempotent requests: the first request with a key is executed and its
// answer stored; a repeat with that key gets the stored answer.
type upstream struct {
	w       *world
	answers map[string][]byte // by idempotency key
	payout  map[string]string // account -> the last payout's description
	landed  map[string]uint64 // account -> the highest fence of a payout made
	n       int
}

func newUpstream(w *world) *upstream {
	return &upstream{w: w, answers: map[string][]byte{}, payout: map[string]string{}, landed: map[string]uint64{}}
}

func (u *upstream) RoundTrip(req *http.Request) (*http.Response, error) {
	w := u.w
	ctx := req.Context()
	w.point(ctx, "effect")
	if req.Method == http.MethodGet { // the effect query
		key := req.URL.Query().Get("idempotency_key")
		if a, ok := u.answers[key]; ok {
			return answer(req, 200, a), nil
		}
		return answer(req, 404, []byte(`{"error":"not found"}`)), nil
	}
	key := req.Header.Get("Idempotency-Key")
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	acct := strings.TrimSuffix(strings.TrimPrefix(req.URL.Path, "/v1/accounts/"), "/payouts")
	apply := func() []byte {
		if a, ok := u.answers[key]; ok {
			return a
		}
		w.notAppliedMu.Lock()
		rid, settled := w.notApplied[key]
		w.notAppliedMu.Unlock()
		if settled {
			w.stats.gate("landed after not applied")
			w.fail("the upstream applied key %s after its receipt %s settled not applied (%q)", key, rid, body)
		}
		// A payout lands in fence order on its account: one of a lower
		// fence after a higher one's is a stale effect, wherever it came
		// from (the gateway, a reconciler's resend, a late delivery).
		var wk string
		var fence, seg, n uint64
		if _, err := fmt.Sscanf(strings.ReplaceAll(string(body), ":", " "), "%s f%d s%d %d", &wk, &fence, &seg, &n); err == nil {
			if fence < u.landed[acct] {
				w.stats.gate("accepted stale")
				w.fail("payout of fence %d landed on %s after one of fence %d (%q)", fence, acct, u.landed[acct], body)
			}
			u.landed[acct] = max(u.landed[acct], fence)
		}
		u.n++
		u.payout[acct] = string(body)
		a, _ := json.Marshal(map[string]any{"id": fmt.Sprint("po_", u.n), "description": string(body)})
		u.answers[key] = a
		return a
	}
	switch {
	case w.chance(0.02):
		w.stats.inject("effect timeout")
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errInjected}
	case w.chance(0.02):
		w.stats.inject("effect lost answer")
		apply()
		return nil, fmt.Errorf("read answer: %w", io.ErrUnexpectedEOF)
	case w.chance(0.01):
		w.stats.inject("effect 5xx")
		return answer(req, 503, []byte(`{"error":"try later"}`)), nil
	case w.chance(0.01):
		// A late request may land at any time: the idempotency key makes it
		// a no-op once a resend settled the receipt.
		w.stats.inject("delayed old message (backend)")
		w.s.spawn(context.Background(), "late-call", func(ctx context.Context) {
			w.s.sleep(ctx, time.Duration(w.rng.IntN(120))*time.Second)
			apply()
		})
		return nil, fmt.Errorf("read answer: %w", context.DeadlineExceeded)
	}
	a := apply()
	w.point(ctx, "after-effect")
	return answer(req, 200, a), nil
}

func answer(req *http.Request, code int, body []byte) *http.Response {
	return &http.Response{StatusCode: code, Status: fmt.Sprint(code, " ", http.StatusText(code)), Proto: "HTTP/1.1",
		ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: req}
}
