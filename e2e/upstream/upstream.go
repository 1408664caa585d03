// Package upstream is a payments-like API for tests, with the idempotency
// semantics of the big providers: a request with a key seen before and the
// same method, path and body gets the saved answer (header
// Idempotent-Replayed: true) and pays nothing; the same key with anything else
// is refused with 422; keys are forgotten after Retention on an injectable clock. Effects are counted, faults (delays,
// dropped answers, connection resets, 5xx) are injected per request, and in
// native-fence mode a lower fence than the account's highest is refused (409).
//
// Routes: POST /v1/accounts/{account}/payouts {"amount":N,"currency":"eur"};
// GET /v1/payouts?idempotency_key=K (the effect query; 404 when none).
package upstream

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configure a Payments API. Zero values take the documented defaults.
type Options struct {
	// Credential is the exact value expected in CredentialHeader ("" accepts any).
	Credential string
	// CredentialHeader defaults to Authorization.
	CredentialHeader string
	// KeyHeader defaults to Idempotency-Key.
	KeyHeader string
	// Retention is how long keys are remembered (default 24 h).
	Retention time.Duration
	// Now is the clock for key expiry (default time.Now).
	Now func() time.Time
	// FenceHeader, when set, turns on native-fence mode: a payout whose
	// fence is below the account's highest is 409 stale_fence.
	FenceHeader string
	// RootHeader and SegmentHeader, when set in native-fence mode, make the
	// service check what a cooperating service checks itself: a fence equal
	// to the account's highest must carry the same root (else 409
	// stale_root) and a segment not below the last one (else 409
	// stale_segment). DelegateHeader, when set, is recorded in the payout
	// (the identity the gateway states wrote it under a delegation).
	RootHeader, SegmentHeader, DelegateHeader string
	// KeyField, when set, reads the key from this top-level member of the
	// JSON body instead of KeyHeader (Square's idempotency_key).
	KeyField string
	// MaxKeyLength, when set, refuses longer keys with 400 (Adyen 64, Square 45).
	MaxKeyLength int
	// ConflictOnReplay answers a same-key replay of a created payout with
	// GoCardless' 409 idempotent_creation_conflict naming the payout, instead
	// of the saved answer.
	ConflictOnReplay bool
	// SearchLag delays a payout's visibility in GET /v1/payouts/search
	// (Stripe Search is eventually consistent), on the Now clock.
	SearchLag time.Duration
}

// Fault is injected into one payout request.
type Fault int

// Faults, consumed one per payout request in the order queued.
const (
	// None handles the request normally.
	None Fault = iota
	// DropResponse applies the payout, then closes the connection without an answer.
	DropResponse
	// Reset resets the connection before applying anything.
	Reset
	// Hang applies the payout, then withholds the answer until the client gives up.
	Hang
	// ServerError answers 500 without applying anything.
	ServerError
	// InProgress answers 409 idempotency_key_in_use without applying
	// anything, as while another request with the key is being processed.
	InProgress
	// SavedServerError applies the payout and answers 500, saving the 500
	// under the key (Stripe replays saved 500s) with Stripe-Should-Retry: false.
	SavedServerError
	// RetryableServerError answers 500 with Stripe-Should-Retry: true,
	// applying and saving nothing.
	RetryableServerError
	// Unavailable answers 503 without applying or saving anything.
	Unavailable
)

// Payout is one effect: money sent.
type Payout struct {
	ID             string `json:"id"`
	Account        string `json:"account"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Fence          uint64 `json:"fence,omitempty"`
	Root           string `json:"root,omitempty"`
	Segment        uint64 `json:"segment,omitempty"`
	Delegate       string `json:"delegate,omitempty"`
}

type saved struct {
	request string // method, path and body digest
	at      time.Time
	status  int
	body    []byte
	header  http.Header
}

// Payments is the fake provider. It is safe for concurrent use.
type Payments struct {
	opt Options

	mu           sync.Mutex
	payouts      []Payout
	created      []time.Time // of each payout, on the Now clock
	keys         map[string]*saved
	fences       map[string]uint64
	roots        map[string]string // of the highest fence, native-fence mode
	segments     map[string]uint64 // the last segment under it
	faults       []Fault
	delay        time.Duration
	requests     int
	leakedAuth   int
	unauthorized int
	staleFences  int
}

// New returns a Payments API.
func New(o Options) *Payments {
	if o.CredentialHeader == "" {
		o.CredentialHeader = "Authorization"
	}
	if o.KeyHeader == "" {
		o.KeyHeader = "Idempotency-Key"
	}
	if o.Retention == 0 {
		o.Retention = 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Payments{opt: o, keys: map[string]*saved{}, fences: map[string]uint64{},
		roots: map[string]string{}, segments: map[string]uint64{}}
}

// Start serves p on a loopback httptest.Server; the caller closes it.
func (p *Payments) Start() *httptest.Server { return httptest.NewServer(p) }

// Inject queues faults for the next payout requests.
func (p *Payments) Inject(f ...Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, f...)
}

// SetDelay makes every later request wait d before it is handled.
func (p *Payments) SetDelay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = d
}

// Effects is the number of payouts made.
func (p *Payments) Effects() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.payouts)
}

// Payouts returns a copy of the payouts made, oldest first.
func (p *Payments) Payouts() []Payout {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Payout(nil), p.payouts...)
}

// Requests is the number of requests received, of any kind.
func (p *Payments) Requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests
}

// LeakedAuthorization counts requests carrying an Authorization header that
// is not the configured credential (a worker's credential forwarded upstream).
func (p *Payments) LeakedAuthorization() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.leakedAuth
}

// Unauthorized counts requests refused for a missing or wrong credential.
func (p *Payments) Unauthorized() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.unauthorized
}

// StaleFences counts payouts refused in native-fence mode for a lower fence.
func (p *Payments) StaleFences() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.staleFences
}

// ServeHTTP implements http.Handler.
func (p *Payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.requests++
	delay := p.delay
	auth, hasAuth := r.Header.Get("Authorization"), r.Header.Values("Authorization") != nil
	if hasAuth && (p.opt.CredentialHeader != "Authorization" || auth != p.opt.Credential) {
		p.leakedAuth++
	}
	ok := p.opt.Credential == "" || r.Header.Get(p.opt.CredentialHeader) == p.opt.Credential
	if !ok {
		p.unauthorized++
	}
	p.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if !ok {
		answer(w, http.StatusUnauthorized, map[string]string{"error": "invalid_api_key"})
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payouts/search":
		p.search(w, r.URL.Query().Get("key"))
	case r.Method == http.MethodGet && len(parts) == 3 && parts[0] == "v1" && parts[1] == "payouts":
		p.byID(w, parts[2])
	case r.Method == http.MethodGet && r.URL.Path == "/v1/payouts":
		p.findByKey(w, r.URL.Query().Get("idempotency_key"))
	case r.Method == http.MethodPost && len(parts) == 4 && parts[0] == "v1" && parts[1] == "accounts" && parts[3] == "payouts":
		p.createPayout(w, r, parts[2])
	default:
		answer(w, http.StatusNotFound, map[string]string{"error": "no_such_route"})
	}
}

func (p *Payments) findByKey(w http.ResponseWriter, key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, po := range p.payouts {
		if key != "" && po.IdempotencyKey == key {
			answer(w, http.StatusOK, po)
			return
		}
	}
	answer(w, http.StatusNotFound, map[string]string{"error": "no_payout_for_key"})
}

func (p *Payments) createPayout(w http.ResponseWriter, r *http.Request, account string) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	key := r.Header.Get(p.opt.KeyHeader)
	if p.opt.KeyField != "" {
		var fields map[string]any
		_ = json.Unmarshal(raw, &fields)
		key, _ = fields[p.opt.KeyField].(string)
		delete(fields, p.opt.KeyField)
		raw, _ = json.Marshal(fields) // the key is not part of the payout
	}
	var in struct {
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || in.Amount <= 0 || in.Currency == "" {
		answer(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	if p.opt.MaxKeyLength > 0 && len(key) > p.opt.MaxKeyLength {
		answer(w, http.StatusBadRequest, map[string]string{"error": "idempotency_key_too_long"})
		return
	}
	sum := sha256.Sum256(raw)
	request := fmt.Sprintf("%s %s %x", r.Method, r.URL.Path, sum)

	p.mu.Lock()
	now := p.opt.Now()
	if s := p.keys[key]; key != "" && s != nil {
		switch {
		case now.Sub(s.at) >= p.opt.Retention:
			delete(p.keys, key) // forgotten: the request is new again
		case s.request != request:
			p.mu.Unlock()
			answer(w, http.StatusUnprocessableEntity, map[string]string{"error": "idempotency_key_reuse"})
			return
		case p.opt.ConflictOnReplay && s.status < 300:
			id := p.byKeyLocked(key)
			p.mu.Unlock()
			answer(w, http.StatusConflict, map[string]any{"error": map[string]any{"code": 409, "type": "invalid_state",
				"errors": []any{map[string]any{"reason": "idempotent_creation_conflict",
					"links": map[string]string{"conflicting_resource_id": id}}}}})
			return
		default:
			p.mu.Unlock()
			w.Header().Set("Idempotent-Replayed", "true")
			for k, v := range s.header {
				w.Header()[k] = v
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(s.status)
			_, _ = w.Write(s.body)
			return
		}
	}
	var fence uint64
	if h := p.opt.FenceHeader; h != "" {
		fence, err = strconv.ParseUint(r.Header.Get(h), 10, 64)
		if err != nil || fence == 0 {
			p.mu.Unlock()
			answer(w, http.StatusBadRequest, map[string]string{"error": "fence_required"})
			return
		}
		if fence < p.fences[account] {
			p.staleFences++
			p.mu.Unlock()
			answer(w, http.StatusConflict, map[string]string{"error": "stale_fence"})
			return
		}
		if refusal := p.checkRootAndSegment(r, account, fence); refusal != "" {
			p.mu.Unlock()
			answer(w, http.StatusConflict, map[string]string{"error": refusal})
			return
		}
		p.fences[account] = fence
	}
	fault := None
	if len(p.faults) > 0 {
		fault, p.faults = p.faults[0], p.faults[1:]
	}
	switch fault {
	case Reset:
		p.mu.Unlock()
		hangUp(w, true)
		return
	case ServerError:
		p.mu.Unlock()
		answer(w, http.StatusInternalServerError, map[string]string{"error": "internal"})
		return
	case InProgress:
		p.mu.Unlock()
		w.Header().Set("Retry-After", "2")
		answer(w, http.StatusConflict, map[string]any{"error": map[string]string{"type": "idempotency_error", "code": "idempotency_key_in_use"}})
		return
	case Unavailable:
		p.mu.Unlock()
		answer(w, http.StatusServiceUnavailable, map[string]string{"error": "unavailable"})
		return
	case RetryableServerError:
		p.mu.Unlock()
		w.Header().Set("Stripe-Should-Retry", "true")
		answer(w, http.StatusInternalServerError, map[string]string{"error": "internal"})
		return
	}
	po := Payout{ID: fmt.Sprintf("po_%d", len(p.payouts)+1), Account: account, Amount: in.Amount,
		Currency: in.Currency, IdempotencyKey: key, Fence: fence}
	if fence != 0 {
		po.Root, po.Segment = p.roots[account], p.segments[account]
		if h := p.opt.DelegateHeader; h != "" {
			po.Delegate = r.Header.Get(h)
		}
	}
	p.payouts = append(p.payouts, po)
	p.created = append(p.created, now)
	body, _ := json.Marshal(po)
	if fault == SavedServerError {
		saved500 := &saved{request: request, at: now, status: http.StatusInternalServerError,
			body: []byte(`{"error":{"type":"api_error"}}`), header: http.Header{"Stripe-Should-Retry": {"false"}}}
		if key != "" {
			p.keys[key] = saved500
		}
		p.mu.Unlock()
		w.Header().Set("Stripe-Should-Retry", "false")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write(saved500.body)
		return
	}
	if key != "" {
		p.keys[key] = &saved{request: request, at: now, status: http.StatusOK, body: body}
	}
	p.mu.Unlock()

	switch fault {
	case DropResponse:
		hangUp(w, false)
		return
	case Hang:
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", "req_"+po.ID)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// hangUp closes the connection without an answer; reset makes it an RST.
func hangUp(w http.ResponseWriter, reset bool) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok && reset {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// checkRootAndSegment is the native-fence service's own check of root and
// segment (RootHeader, SegmentHeader) for a fence not below the account's
// highest, under p.mu; it records them and returns "" when the payout may
// go on, else the refusal.
func (p *Payments) checkRootAndSegment(r *http.Request, account string, fence uint64) string {
	var root string
	var seg uint64
	if h := p.opt.RootHeader; h != "" {
		if root = r.Header.Get(h); root == "" {
			return "root_required"
		}
	}
	if h := p.opt.SegmentHeader; h != "" {
		var err error
		if seg, err = strconv.ParseUint(r.Header.Get(h), 10, 64); err != nil || seg == 0 {
			return "segment_required"
		}
	}
	if fence == p.fences[account] {
		if p.opt.RootHeader != "" && root != p.roots[account] {
			p.staleFences++
			return "stale_root"
		}
		if p.opt.SegmentHeader != "" && seg < p.segments[account] {
			p.staleFences++
			return "stale_segment"
		}
	}
	p.roots[account], p.segments[account] = root, seg
	return ""
}
