package client

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/fencegate/fencegate/domain"
)

// DelegatedWriter is the delegate's side of a delegation: a downstream
// worker (a queue consumer) writes under the owner's grant with the
// delegation, authenticated as itself. It carries the segment numbers the
// owner assigned (each message names its segment), fetches status proofs
// issued for the delegation from the registry and refreshes them before
// they lapse, and lets the gateway judge every write: the delegate is
// refused exactly as the owner would be once a newer fence was accepted
// (STALE_OWNER), whatever segment it sends.
//
// Once refused for good — STALE_OWNER, FENCE_REGRESSION, a delegation the
// registry no longer states (revoked or unknown: DELEGATION_INVALID), or a
// lease the registry states no longer held (LEASE_NOT_HELD, refused locally
// before anything is sent, as the owner's writers refuse: a gateway in
// shadow mode would forward the write) — the writer sends nothing more and
// answers every later write with that cause (Err). It is safe for
// concurrent use; a retry of a segment whose outcome was unknown is
// answered by the gateway from the original receipt.
type DelegatedWriter struct {
	c        *Client
	grant    string
	token    string
	claims   domain.Delegation
	noProofs bool

	mu        sync.Mutex
	proof     string // states HELD
	refreshAt time.Time
	cause     error
}

// DelegatedOption configures a DelegatedWriter.
type DelegatedOption func(*DelegatedWriter)

// WithoutStatusProofs sends no status proof: for gateways in query mode,
// which ask the registry about the delegation themselves.
func WithoutStatusProofs() DelegatedOption { return func(w *DelegatedWriter) { w.noProofs = true } }

// DelegatedWriter returns the writer for the owner's grant (compact JWS)
// and the delegation token it minted for this client's identity. It sends
// nothing; an unreadable delegation is DELEGATION_INVALID.
func (c *Client) DelegatedWriter(grant, delegation string, opts ...DelegatedOption) (*DelegatedWriter, error) {
	d, err := DelegationClaims(delegation)
	if err != nil {
		return nil, err
	}
	w := &DelegatedWriter{c: c, grant: grant, token: delegation, claims: d}
	for _, o := range opts {
		o(w)
	}
	return w, nil
}

// Claims are the delegation's claims (as read, unverified).
func (w *DelegatedWriter) Claims() domain.Delegation { return w.claims }

// Err is why the writer stopped for good (nil while it may write).
func (w *DelegatedWriter) Err() error { w.mu.Lock(); defer w.mu.Unlock(); return w.cause }

// Put writes body to key in store as segment seg.
func (w *DelegatedWriter) Put(ctx context.Context, store, key string, seg uint64, body io.ReadSeeker, contentType string) (domain.Receipt, error) {
	var rc domain.Receipt
	err := w.send(ctx, func(ctx context.Context, f Fence) error {
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return domain.Wrap(err, domain.CodeInvalidRequest, "rewind body")
		}
		var err error
		rc, err = w.c.PutObject(ctx, store, key, f, body, contentType)
		return err
	}, seg)
	return rc, err
}

// Delete deletes key in store as segment seg.
func (w *DelegatedWriter) Delete(ctx context.Context, store, key string, seg uint64) (domain.Receipt, error) {
	var rc domain.Receipt
	err := w.send(ctx, func(ctx context.Context, f Fence) error {
		var err error
		rc, err = w.c.DeleteObject(ctx, store, key, f)
		return err
	}, seg)
	return rc, err
}

// Call makes the fenced API call METHOD path as segment seg; a cooperating
// (nativeFence) service is told the delegate's identity.
func (w *DelegatedWriter) Call(ctx context.Context, api, method, path string, seg uint64, body []byte, contentType string) (*APIResponse, error) {
	var out *APIResponse
	err := w.send(ctx, func(ctx context.Context, f Fence) error {
		var err error
		out, err = w.c.CallAPI(ctx, api, method, path, f, body, contentType)
		return err
	}, seg)
	return out, err
}

// send runs one write of segment seg with the current proof. A first
// STATUS_INVALID (the proof may have lapsed on the way) is retried once with
// a fresh proof; refusals for good stop the writer.
func (w *DelegatedWriter) send(ctx context.Context, write func(context.Context, Fence) error, seg uint64) error {
	for attempt := 0; ; attempt++ {
		proof, err := w.ready(ctx)
		if err != nil {
			return err
		}
		err = write(ctx, Fence{Grant: w.grant, Status: proof, Segment: seg, Delegation: w.token})
		switch code := domain.ErrorCode(err); {
		case err == nil:
			return nil
		case code == domain.CodeStaleOwner || code == domain.CodeFenceRegression:
			w.stop(err)
		case (code == domain.CodeStatusInvalid || code == domain.CodeEpochRevoked) && attempt == 0:
			w.expire()
			continue
		}
		return err
	}
}

// ready returns the proof to send (none without proofs), asking the
// registry when the proof is due for refresh. A lease the registry states
// not HELD stops the writer for good with LEASE_NOT_HELD, nothing sent.
func (w *DelegatedWriter) ready(ctx context.Context) (string, error) {
	w.mu.Lock()
	if w.cause != nil {
		defer w.mu.Unlock()
		return "", w.cause
	}
	if w.noProofs {
		w.mu.Unlock()
		return "", nil
	}
	if w.proof != "" && w.c.now().Before(w.refreshAt) {
		defer w.mu.Unlock()
		return w.proof, nil
	}
	w.mu.Unlock()
	sent := w.c.now()
	st, err := w.c.DelegationStatus(ctx, w.claims.ID, w.claims.GrantDigest)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch code := domain.ErrorCode(err); {
	case err == nil:
	case code == domain.CodeDelegationInvalid || code == domain.CodeOwnerMismatch:
		if w.cause == nil {
			w.cause = err // revoked, forgotten, or not ours: never again
		}
		return "", w.cause
	default:
		return "", err
	}
	if w.cause != nil {
		return "", w.cause // stopped while the registry was asked
	}
	if st.State != domain.StateHeld {
		// EXPIRED, RELEASED and REVOKED are final: the owner's writers send
		// nothing more once the registry states them, and neither does the
		// delegate.
		w.cause = &domain.Error{Code: domain.CodeLeaseNotHeld, Message: fmt.Sprintf(
			"registry reports lease %s %s for delegation %s: no new effect is sent", w.claims.Lease, st.State, w.claims.ID)}
		w.proof = ""
		return "", w.cause
	}
	w.proof = st.StatusProof
	// Refreshed at 4/5 of its life, by the answer's expiry and the proof's
	// own iat/exp (robust to clock skew).
	life := st.StatusExpiresAt.Sub(sent)
	if pl, ok := proofLife(st.StatusProof); ok {
		life = min(life, pl)
	}
	w.refreshAt = sent
	if life > 0 {
		w.refreshAt = sent.Add(life * 4 / 5)
	}
	return w.proof, nil
}

func (w *DelegatedWriter) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refreshAt = time.Time{}
}

func (w *DelegatedWriter) stop(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause == nil {
		w.cause = err
	}
}
