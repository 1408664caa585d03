package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencegate/fencegate/domain"
)

// State is the client's local view of a lease (DESIGN §8).
type State string

// Local lease states. Only HELD and RENEWING allow new effects.
const (
	// StateRequested: the acquisition has not been answered yet.
	StateRequested State = "REQUESTED"
	// StateHeld: the registry confirmed the lease and the local deadline has not passed.
	StateHeld State = "HELD"
	// StateRenewing: HELD, with a renewal in flight.
	StateRenewing State = "RENEWING"
	// StateOwnershipUnknown: a renewal or status answer was uncertain, or the
	// local deadline passed unconfirmed. No new effect is sent; writes already
	// issued may still land. A confirmed renewal returns to HELD.
	StateOwnershipUnknown State = "OWNERSHIP_UNKNOWN"
	// StateExpired: the registry confirmed the lease is no longer held.
	StateExpired State = "EXPIRED"
	// StateReleased: the lease was given up voluntarily.
	StateReleased State = "RELEASED"
	// StateRevoked: the registry or a gateway reported the lease or its epoch revoked.
	StateRevoked State = "REVOKED"
	// StateLost: a gateway refused the fence for good (STALE_OWNER, FENCE_REGRESSION).
	StateLost State = "LOST"
)

// Terminal reports whether s is final: no transition leaves it.
func (s State) Terminal() bool {
	return s == StateExpired || s == StateReleased || s == StateRevoked || s == StateLost
}

// LeaseParams configures a Lease.
type LeaseParams struct {
	AcquireParams
	// RenewFraction of the TTL after which a Tick renews (default 1/3).
	RenewFraction float64
	// Attempts bounds acquisition attempts after uncertain answers (default 5).
	Attempts int
	// RetryWait is the wait between acquisition attempts and, in Run, between
	// recovery attempts while OWNERSHIP_UNKNOWN (default 500ms).
	RetryWait time.Duration
	// OnStateChange, when set, is called after every change of the local
	// state, with the new state's cause (nil for HELD, RENEWING and a
	// voluntary release). It runs without the lease's locks, on the
	// goroutine that made the change, or, for changes made while a commit
	// (a write, a delegation) is in progress, on the committing goroutine
	// once the commit ends: changes arrive in order, and State is the truth
	// when changes race. It may write, delegate and read NextSegment. See
	// also Lost and Context.
	OnStateChange func(from, to State, cause error)
}

// Lease is one lease driven by the local state machine. All methods are safe
// for concurrent use; commits through its writers are serialised so that
// segment numbers follow commit order.
type Lease struct {
	c *Client
	p LeaseParams

	mu             sync.Mutex
	state          State
	cause          error
	info           LeaseInfo
	firstSend      time.Time // of the acquisition: the lease cannot be older
	deadline       time.Time // local: ownership unconfirmed from here on
	renewAt        time.Time
	proofExp       time.Time
	proofRefreshAt time.Time
	renewing       bool

	// commitSem is the commit lock, held for a whole commit (lockCommit):
	// numbering follows commit order. A channel of one, so that Release
	// can wait for it bounded by its context (waitCommits).
	commitSem chan struct{}
	nextSeg   uint64
	doubt     *inDoubt
	// settledForOthers are effects whose doubt another effect's commit
	// settled COMMITTED, kept for their own retry (takeSettled).
	settledForOthers []settledForOther
	led              ledger // effect keys of the operation (keyed.go)

	lost    chan struct{} // closed once new effects are not allowed (lost.go)
	changes []stateChange // to report once l.mu is released
	// committing: a commit holds commitSem, and reports changes when it ends.
	committing bool
	// mayResume: the caller gave the request ID, so the lease may be one an
	// earlier process wrote under (asked again after a restart): the first
	// commit reads the operation's receipts (loadLedger) to go on after its
	// segments. A generated request ID names a lease nobody wrote under yet.
	mayResume bool
}

// NewLease returns a lease in REQUESTED with its request ID fixed for life
// (p.RequestID, or one generated now). It sends nothing.
func (c *Client) NewLease(p LeaseParams) (*Lease, error) {
	if p.Resource == "" || p.OperationID == "" || p.TTL <= 0 {
		return nil, domain.Errorf(domain.CodeInvalidRequest, "a lease needs a resource, an operation ID and a positive TTL")
	}
	resume := p.RequestID != "" // the caller's own: an earlier process may have written under it
	if p.RequestID == "" {
		p.RequestID = newRequestID()
	}
	if p.RenewFraction <= 0 || p.RenewFraction >= 1 {
		p.RenewFraction = 1.0 / 3
	}
	if p.Attempts <= 0 {
		p.Attempts = 5
	}
	if p.RetryWait <= 0 {
		p.RetryWait = 500 * time.Millisecond
	}
	return &Lease{c: c, p: p, state: StateRequested, nextSeg: 1, lost: make(chan struct{}), mayResume: resume,
		commitSem: make(chan struct{}, 1)}, nil
}

// AcquireLease creates a lease and acquires it. An uncertain answer is
// recovered by asking again with the same request ID, never a new identity.
// On failure the lease (if any) is returned with the error; it stays
// REQUESTED after uncertain answers, and Acquire may be called again.
func (c *Client) AcquireLease(ctx context.Context, p LeaseParams) (*Lease, error) {
	l, err := c.NewLease(p)
	if err != nil {
		return nil, err
	}
	return l, l.Acquire(ctx)
}

// Acquire asks the registry for the lease with the lease's fixed request ID,
// up to Attempts times while answers are uncertain.
func (l *Lease) Acquire(ctx context.Context) error {
	l.mu.Lock()
	if l.state != StateRequested {
		st := l.state
		l.unlock()
		return domain.Errorf(domain.CodeInvalidRequest, "lease is %s, not REQUESTED", st)
	}
	l.unlock()
	for attempt := 1; ; attempt++ {
		sent := l.c.now()
		l.mu.Lock()
		if l.firstSend.IsZero() {
			l.firstSend = sent
		}
		l.unlock()
		info, err := l.c.Acquire(ctx, l.p.AcquireParams)
		if err == nil {
			l.mu.Lock()
			if l.state.Terminal() {
				// Released while the acquisition was in flight: the lease
				// stays released, and the one the registry granted meanwhile
				// is given back rather than left to block the resource for
				// its TTL.
				l.unlock()
				_, rerr := l.c.Release(ctx, info.Lease)
				return errors.Join(domain.Errorf(domain.CodeLeaseNotHeld,
					"lease was released while its acquisition was in flight; the granted lease %s is released", info.Lease), rerr)
			}
			l.adopt(info, l.firstSend)
			if l.state == StateHeld && !l.c.now().Before(l.deadline) {
				// Answered later than the TTL after the first send (a long
				// poll, retries): the local deadline, counted from that send,
				// has passed. Confirm the lease with a renewal at once, whose
				// own send sets a deadline ahead, rather than hand out a
				// lease the first write finds unknown.
				l.toUnknown(errDeadline)
				l.unlock()
				_ = l.Tick(ctx)
				l.mu.Lock()
			}
			defer l.unlock()
			return l.notHeldLocked()
		}
		if grantedNothing(err) {
			// No attempt of this request ID holds the lease (a repeat would
			// have been answered the lease), so the next Acquire's local
			// deadline counts from its own send.
			l.mu.Lock()
			l.firstSend = time.Time{}
			l.unlock()
			return err
		}
		if !IsUncertain(err) || attempt >= l.p.Attempts || ctx.Err() != nil {
			return err
		}
		if serr := l.c.sleep(ctx, l.p.RetryWait); serr != nil {
			return errors.Join(err, serr)
		}
	}
}

// adopt takes a confirmed acquisition or renewal sent at sent.
func (l *Lease) adopt(info LeaseInfo, sent time.Time) {
	if info.Grant == "" {
		info.Grant, info.GrantDigest = l.info.Grant, l.info.GrantDigest
	}
	if info.S3Credentials == nil { // a renewal keeps the lease's credentials
		info.S3Credentials = l.info.S3Credentials
	}
	l.info = info
	if st := localState(info.State); st != StateHeld {
		l.terminate(st, domain.Errorf(domain.CodeLeaseNotHeld, "registry reports lease %s %s", info.Lease, info.State))
		return
	}
	l.deadline = minTime(sent.Add(l.p.TTL), info.ExpiresAt)
	l.renewAt = sent.Add(time.Duration(float64(l.p.TTL) * l.p.RenewFraction))
	l.setProof(info, sent)
	l.set(StateHeld, nil)
}

// setProof keeps info's status proof and when to refresh it: at 4/5 of its
// remaining life, never later than the local deadline.
func (l *Lease) setProof(info LeaseInfo, sent time.Time) {
	l.info.StatusProof, l.info.StatusExpiresAt = info.StatusProof, info.StatusExpiresAt
	exp := l.deadline
	if info.StatusExpiresAt != nil {
		exp = minTime(exp, *info.StatusExpiresAt)
	}
	if life, ok := proofLife(info.StatusProof); ok {
		exp = minTime(exp, sent.Add(life)) // robust to clock skew
	}
	now := l.c.now()
	l.proofExp = exp
	l.proofRefreshAt = now.Add(exp.Sub(now) * 4 / 5)
}

// localState maps a registry state onto the local one.
func localState(s domain.StatusState) State {
	switch s {
	case domain.StateHeld:
		return StateHeld
	case domain.StateReleased:
		return StateReleased
	case domain.StateRevoked:
		return StateRevoked
	}
	return StateExpired
}

// terminate moves to a terminal state unless already in one.
func (l *Lease) terminate(s State, cause error) {
	if !l.state.Terminal() {
		l.set(s, cause)
	}
}

// toUnknown moves a live lease to OWNERSHIP_UNKNOWN.
func (l *Lease) toUnknown(cause error) {
	if !l.state.Terminal() && l.state != StateRequested {
		l.set(StateOwnershipUnknown, cause)
	}
}

// notHeldLocked is nil if new effects may be sent, else a LEASE_NOT_HELD error.
func (l *Lease) notHeldLocked() error {
	if l.state == StateHeld || l.state == StateRenewing {
		return nil
	}
	return &domain.Error{Code: domain.CodeLeaseNotHeld, Err: l.cause,
		Message: fmt.Sprintf("lease %s is %s locally: no new effect is sent", l.info.Lease, l.state)}
}

// Release gives the lease up: locally RELEASED at once, whatever the answer
// (no new effect is sent from here on; an unanswered release leaves the
// registry to expire it). It then waits for the commits in flight (writes,
// delegations) to be answered before it sends the release, so that once it
// returns no effect of the lease is still on its way: `defer
// lease.Release(ctx)` means no more effects. If ctx ends first, it sends
// nothing and returns ctx's error (the lease expires by its TTL). Releasing
// a terminal lease sends nothing, but waits for commits in flight all the
// same.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	send := !l.state.Terminal() && l.state != StateRequested
	id := l.info.Lease
	l.terminate(StateReleased, nil) // no new effect from here on
	l.unlock()
	if err := l.waitCommits(ctx); err != nil {
		if !send {
			return err
		}
		return fmt.Errorf("release of lease %s: a commit still in flight, nothing sent (the lease expires by its TTL): %w", id, err)
	}
	if !send {
		return nil
	}
	_, err := l.c.Release(ctx, id)
	return err
}

// Refresh asks the registry for the lease's status (GET /v1/leases/{lease})
// and keeps the fresh proof and the grant it is bound to. An uncertain or
// failed answer moves the lease to OWNERSHIP_UNKNOWN, also one cut short by
// ctx's deadline, unless the caller cancelled ctx (its cancellation says
// nothing about the lease) or ctx had ended before the request was sent;
// EXPIRED, RELEASED and REVOKED are taken as confirmed.
func (l *Lease) Refresh(ctx context.Context) error {
	l.mu.Lock()
	if err := l.notHeldLocked(); err != nil {
		l.unlock()
		return err
	}
	id := l.info.Lease
	l.unlock()
	if err := ctx.Err(); err != nil {
		return err // nothing sent, nothing learned
	}
	sent := l.c.now()
	info, err := l.c.LeaseStatus(ctx, id)
	l.mu.Lock()
	defer l.unlock()
	if err != nil && cancelledByCaller(ctx) {
		// The caller gave up, not the registry: the lease is as it was
		// (its local deadline still bounds it) and the next send refreshes.
		return err
	}
	if err != nil {
		l.toUnknown(err)
		return err
	}
	if st := localState(info.State); st != StateHeld {
		l.terminate(st, domain.Errorf(domain.CodeLeaseNotHeld, "registry reports lease %s %s", id, info.State))
		return l.notHeldLocked()
	}
	if err := l.notHeldLocked(); err != nil {
		return err
	}
	// After a key rotation or policy bump the registry re-issues the lease's
	// grant (same lease and fence); the fresh proof is bound to that grant.
	if info.Grant != "" && info.Lease == l.info.Lease && info.FenceToken == l.info.FenceToken {
		l.info.Grant, l.info.GrantDigest = info.Grant, info.GrantDigest
	}
	l.setProof(info, sent)
	return nil
}

// lose ends the lease after a gateway refused its fence for good.
func (l *Lease) lose(err error) {
	l.mu.Lock()
	defer l.unlock()
	if domain.ErrorCode(err) == domain.CodeEpochRevoked {
		l.terminate(StateRevoked, err)
	} else {
		l.terminate(StateLost, err)
	}
}

// State is the lease's local state now.
func (l *Lease) State() State { l.mu.Lock(); defer l.unlock(); return l.state }

// Err is why the lease is OWNERSHIP_UNKNOWN or terminal (nil otherwise, and
// for a voluntary release).
func (l *Lease) Err() error { l.mu.Lock(); defer l.unlock(); return l.cause }

// Info is the registry's last answer for the lease, with the current proof.
func (l *Lease) Info() LeaseInfo { l.mu.Lock(); defer l.unlock(); return l.info }

// ID is the lease's ID ("" while REQUESTED).
func (l *Lease) ID() string { return l.Info().Lease }

// RequestID is the acquisition's idempotency key, fixed for the lease's life.
func (l *Lease) RequestID() string { return l.p.RequestID }

// Grant is the signed grant (compact JWS).
func (l *Lease) Grant() string { return l.Info().Grant }

// StatusProof is the current status proof (compact JWS).
func (l *Lease) StatusProof() string { return l.Info().StatusProof }

// S3Credentials are the lease's S3 credentials, if they were asked for at
// acquisition (AcquireParams.S3Credentials). They stay the same for the
// lease's life and stop working at the gateway when it ends.
func (l *Lease) S3Credentials() (domain.S3AccessKeys, bool) {
	c := l.Info().S3Credentials
	if c == nil {
		return domain.S3AccessKeys{}, false
	}
	return *c, true
}

// Fence is the lease's fence token.
func (l *Lease) Fence() uint64 { return l.Info().FenceToken }

// Deadline is the local time after which ownership is unconfirmed unless a
// renewal has been confirmed.
func (l *Lease) Deadline() time.Time { l.mu.Lock(); defer l.unlock(); return l.deadline }

// NextSegment is the segment number the next new commit will carry.
func (l *Lease) NextSegment() uint64 {
	l.commitSem <- struct{}{}
	defer func() { <-l.commitSem }()
	return l.nextSeg
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "req-" + hex.EncodeToString(b[:])
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// grantedNothing reports whether err, an acquisition's answer, proves that
// the request granted nothing: a refusal of the request itself. A store
// fault (BACKEND_UNAVAILABLE: the grant may be written and only its
// replication unconfirmed), INTERNAL or an uncertain answer proves nothing.
func grantedNothing(err error) bool {
	switch domain.ErrorCode(err) {
	case domain.CodeLeaseHeld, domain.CodeInvalidRequest, domain.CodeForbidden, domain.CodeUnauthenticated,
		domain.CodeRequestIDConflict, domain.CodeStateLost:
		return !IsUncertain(err)
	}
	return false
}
