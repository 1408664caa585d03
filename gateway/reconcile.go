package gateway

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
)

// Resolver settles a receipt whose outcome is unknown by querying the effect.
// It returns State UNKNOWN when the effect still cannot be determined.
type Resolver interface {
	Resolve(ctx context.Context, r fencegate.Receipt) (fencegate.Outcome, error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context, r fencegate.Receipt) (fencegate.Outcome, error)

// Resolve calls f.
func (f ResolverFunc) Resolve(ctx context.Context, r fencegate.Receipt) (fencegate.Outcome, error) {
	return f(ctx, r)
}

// Reconciler settles UNKNOWN receipts, and PENDING receipts orphaned by a
// crash (older than Orphan), through the Resolver for their target. Receipts
// still UNKNOWN after Deadline are reported by Overdue for manual resolution.
type Reconciler struct {
	Store fencegate.FenceStore
	// Resolver picks the resolver of a target; nil means none can settle it.
	Resolver func(target string) Resolver
	Now      func() time.Time
	// Orphan is the age after which a PENDING receipt is taken as orphaned; it
	// must exceed the gateway's effect timeout. Default 2 minutes.
	Orphan time.Duration
	// Deadline is the age after which an UNKNOWN receipt needs a person. Default 15 minutes.
	Deadline time.Duration
	Log      *slog.Logger
	// OnOverdue, if set, is told after each pass which UNKNOWN receipts are
	// past Deadline (the same list Overdue answers), to raise an alarm.
	OnOverdue func(overdue []fencegate.Receipt)
	// Observe, if set, is told each pass's backlog (UNKNOWN receipts, the
	// oldest one's age, the overdue ones), each receipt settled and each
	// fence store fault.
	Observe Observer

	mu   sync.Mutex
	next map[string]retryState
	// resume is where the next pass goes on reading each state's list
	// (collectFrom): a list longer than passLimit is read in turns.
	resume map[fencegate.ReceiptState]string
}

type retryState struct {
	at    time.Time
	delay time.Duration
}

// The accessors below apply the documented defaults without writing to rc,
// so passes and REST reads may run concurrently.

func (rc *Reconciler) now() time.Time {
	if rc.Now == nil {
		return time.Now()
	}
	return rc.Now()
}

func (rc *Reconciler) orphan() time.Duration {
	if rc.Orphan <= 0 {
		return 2 * time.Minute
	}
	return rc.Orphan
}

func (rc *Reconciler) deadline() time.Duration {
	if rc.Deadline <= 0 {
		return 15 * time.Minute
	}
	return rc.Deadline
}

func (rc *Reconciler) log() *slog.Logger {
	if rc.Log == nil {
		return slog.Default()
	}
	return rc.Log
}

// IsOverdue reports whether r is an UNKNOWN receipt past Deadline: it needs a person.
func (rc *Reconciler) IsOverdue(r fencegate.Receipt) bool {
	return r.State == fencegate.ReceiptUnknown && rc.now().Sub(r.CreatedAt) >= rc.deadline()
}

// Resender is implemented by a Resolver that resends requests upstream:
// WillResend reports whether Resolve would send r again now. Before such a
// send the gateway claims the receipt in the store (claimResend), so that an
// operator's verdict and the resend cannot both stand.
//
// MayBeSending reports whether a resend claimed at r.SettledAt (the claim's
// time) may still be open: a resend was allowed then and the send timeout has
// not passed since.
type Resender interface {
	WillResend(r fencegate.Receipt) bool
	MayBeSending(r fencegate.Receipt) bool
}

// Lander is implemented by a Resolver whose effects may land after their
// receipt was answered (ObjectResolver): LandsUntil is the last instant r's
// effect may land; only after it may r be called NOT_APPLIED.
type Lander interface {
	LandsUntil(r fencegate.Receipt) time.Time
}

// MayStillLand reports whether r's effect may still land now (Lander), and
// until when: an operator's NOT_APPLIED waits for it, as the reconciler's
// own does.
func (rc *Reconciler) MayStillLand(r fencegate.Receipt) (time.Time, bool) {
	l, ok := rc.resolver(r.Target).(Lander)
	if !ok {
		return time.Time{}, false
	}
	until := l.LandsUntil(r)
	return until, rc.now().Before(until)
}

// MayBeResending reports whether a claimed resend of the UNKNOWN receipt r
// may still be open (Resender.MayBeSending): an operator's verdict waits.
func (rc *Reconciler) MayBeResending(r fencegate.Receipt) bool {
	rs, ok := rc.resolver(r.Target).(Resender)
	return ok && r.State == fencegate.ReceiptUnknown && rs.MayBeSending(r)
}

// orphanClaim is the Error of a PENDING orphan's claim (claimResend): until
// the resend's answer replaces it, a replay does not send beside it.
const orphanClaim = "orphaned: the kept request is resent under its key"

// resendClaim begins the Error of an UNKNOWN receipt's claim (claimResend),
// followed by the last error: until the resend's answer replaces it, nobody
// (a replay, another pass or replica) sends beside it.
const resendClaim = "a resend under its key is open"

// claimOpen reports whether r carries a claim (orphanClaim, resendClaim)
// whose send may still be open.
func claimOpen(rs Resender, r fencegate.Receipt) bool {
	return (r.Error == orphanClaim || strings.HasPrefix(r.Error, resendClaim)) && rs.MayBeSending(r)
}

// claimResend records, before res resends r upstream, that a send is about
// to be open (an UNKNOWN settle of r with nothing else changed: SettledAt
// moves to now; a PENDING orphan becomes UNKNOWN, its resend allowed). It
// is a conditional write at the store: if an operator settled r first, it
// is RECEIPT_SETTLED and ok is false, and nothing is sent after the
// operator's verdict; once it succeeded, an operator's verdict read before
// it fails its IfSettledAt precondition, and one read after it is refused
// while the resend may be open (Server.resolve). ok is also false, with
// nothing written, while a claimed resend may still be open. ok
// is true when res sends nothing (no claim needed).
func claimResend(ctx context.Context, store fencegate.FenceStore, res Resolver, r fencegate.Receipt, now time.Time) (fencegate.Receipt, bool) {
	rs, sends := res.(Resender)
	if !sends || (r.State != fencegate.ReceiptUnknown && r.State != fencegate.ReceiptPending) || !rs.WillResend(r) {
		return r, true
	}
	if claimOpen(rs, r) {
		// A claimed resend (another pass's, another replica's, a replay's)
		// may still be open: none is sent beside it, by a replay or a
		// reconciler (the upstream would answer the second "in progress",
		// and each such answer would spend an attempt).
		return r, false
	}
	// The claim is conditional on the receipt as read: another replica's
	// claim or recorded answer since (a resend ruled out, say) wins, and
	// this one sends nothing.
	claim := r.Error
	switch {
	case claim == "":
		claim = resendClaim
	case !strings.HasPrefix(claim, resendClaim):
		claim = resendClaim + " (last: " + r.Error + ")"
	}
	o := fencegate.Outcome{State: fencegate.ReceiptUnknown, Resend: r.Resend, Error: claim, Now: now}
	if r.SettledAt != nil {
		o.IfSettledAt = *r.SettledAt
	}
	if r.State == fencegate.ReceiptPending {
		// An orphan (only the reconciler resends one): its resend is
		// claimed like any other, so that nothing settles it meanwhile as
		// if it were untouched (an admitting gateway's queued NOT_APPLIED
		// is conditional on that, Outcome.IfPending).
		o.Resend, o.Error, o.IfPending = true, orphanClaim, true
	}
	if r.RetryAt != nil && r.RetryAt.After(now) {
		o.RetryAfter = r.RetryAt.Sub(now)
	}
	claimed, err := store.Settle(ctx, r.ID, o)
	if err != nil {
		return r, false
	}
	return claimed, true
}

// GiverUp is implemented by a Resolver that can tell it has given up on a
// receipt: no attempt it would make settles it (its strategy is manual, the
// kept request may not be resent, the key is past retention, the attempts
// are spent), so the receipt waits for a person.
type GiverUp interface {
	GaveUp(r fencegate.Receipt) bool
}

// AwaitsPerson reports whether r is an UNKNOWN receipt that only a person
// settles now: past Deadline (IsOverdue), with no resolver for its target, or
// with a resolver that has given up on it (GiverUp). Any other UNKNOWN
// receipt is still being reconciled: a verdict by hand could contradict what
// a resend or lookup is about to learn.
func (rc *Reconciler) AwaitsPerson(r fencegate.Receipt) bool {
	if r.State != fencegate.ReceiptUnknown {
		return false
	}
	if rc.IsOverdue(r) {
		return true
	}
	res := rc.resolver(r.Target)
	if res == nil {
		return true
	}
	g, ok := res.(GiverUp)
	return ok && g.GaveUp(r)
}

// RunOnce makes one pass and returns how many receipts it settled.
func (rc *Reconciler) RunOnce(ctx context.Context) (int, error) {
	now := rc.now()
	pending, headP, endP, err := rc.collectFrom(ctx, fencegate.ReceiptPending)
	if err != nil {
		rc.observe().StoreError("list")
		return 0, err
	}
	unknown, headU, endU, err := rc.collectFrom(ctx, fencegate.ReceiptUnknown)
	if err != nil {
		rc.observe().StoreError("list")
		return 0, err
	}
	all := append(pending, unknown...)
	if headP && endP && headU && endU {
		// Only a pass that read both lists whole knows which receipts left
		// them: one that read a turn keeps the others' retry delays.
		rc.prune(all)
	}
	settled := 0
	done := map[string]bool{}
	for _, r := range all {
		if r.State == fencegate.ReceiptPending && now.Before(rc.orphanAt(r)) {
			// Not yet orphaned, but an object that names it proves it at
			// any age (a deferred settle whose process crashed).
			if now.Sub(r.CreatedAt) >= proveAfter && rc.proveYoung(ctx, r) {
				settled++
			}
			continue
		}
		if !rc.due(r.ID, now) {
			continue
		}
		out := fencegate.Outcome{State: fencegate.ReceiptUnknown}
		if res := rc.resolver(r.Target); res != nil {
			claimed, ok := claimResend(ctx, rc.Store, res, r, rc.now())
			if !ok {
				rc.log().Warn("reconcile: no resend: another may be open, or the receipt was settled meanwhile", "receipt", r.ID)
				rc.backoff(r.ID, now)
				continue
			}
			r = claimed
			o, err := resolve(ctx, rc.log(), res, r)
			if err != nil {
				rc.log().Warn("reconcile: effect query failed", "receipt", r.ID, "err", err)
				if rc.keepPending(r, res, now) {
					rc.backoff(r.ID, now)
					continue
				}
			} else {
				out = o
			}
		}
		if !Learnt(r, out) {
			rc.backoff(r.ID, now)
			continue
		}
		out.Now = rc.now()
		if _, err := rc.Store.Settle(ctx, r.ID, out); err != nil {
			if !isRuling(err) {
				rc.observe().StoreError("settle")
			}
			rc.log().Warn("reconcile: settle failed", "receipt", r.ID, "err", err)
			continue
		}
		rc.observe().Settled(out.State)
		if out.State == fencegate.ReceiptUnknown {
			// Another attempt recorded; the next one waits, at least as long
			// as the upstream asked (Retry-After).
			rc.backoffAtLeast(r.ID, now, out.RetryAfter)
			continue
		}
		rc.forget(r.ID)
		settled++
		done[r.ID] = true
		rc.log().Info("reconciled", "receipt", r.ID, "state", out.State)
	}
	var overdue []fencegate.Receipt
	left, oldest := 0, time.Duration(0)
	if !headU {
		// This pass read a later turn of the list: the backlog and the
		// overdue alarm are of its head, as Overdue answers (oldest first).
		if unknown, err = rc.collect(ctx, fencegate.ReceiptUnknown); err != nil {
			rc.observe().StoreError("list")
			return settled, err
		}
	}
	for _, r := range unknown {
		if done[r.ID] {
			continue
		}
		left++
		oldest = max(oldest, now.Sub(r.CreatedAt))
		if rc.IsOverdue(r) {
			overdue = append(overdue, r)
		}
	}
	rc.observe().Backlog(left, oldest, len(overdue))
	if rc.OnOverdue != nil {
		rc.OnOverdue(overdue)
	}
	return settled, nil
}

// keepPending reports whether an orphaned PENDING receipt whose effect could
// not be queried stays PENDING instead of becoming UNKNOWN: an object write
// (its resolver proves) may have been answered COMMITTED by a process that
// died before its deferred settle was durable, and such a receipt must never
// read UNKNOWN. Past the deadline it is raised (UNKNOWN, overdue) all the
// same: a person must look.
func (rc *Reconciler) keepPending(r fencegate.Receipt, res Resolver, now time.Time) bool {
	_, proves := res.(Prover)
	return proves && r.State == fencegate.ReceiptPending && now.Sub(r.CreatedAt) < rc.deadline()
}

func (rc *Reconciler) observe() Observer {
	if rc.Observe == nil {
		return NopObserver{}
	}
	return rc.Observe
}

// Run calls RunOnce every interval until ctx ends.
func (rc *Reconciler) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := rc.RunOnce(ctx); err != nil && ctx.Err() == nil {
			rc.log().Warn("reconcile pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Overdue lists UNKNOWN receipts older than Deadline: they need a person.
func (rc *Reconciler) Overdue(ctx context.Context) ([]fencegate.Receipt, error) {
	all, err := rc.collect(ctx, fencegate.ReceiptUnknown)
	if err != nil {
		return nil, err
	}
	var out []fencegate.Receipt
	for _, r := range all {
		if rc.IsOverdue(r) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (rc *Reconciler) resolver(target string) Resolver {
	if rc.Resolver == nil {
		return nil
	}
	return rc.Resolver(target)
}

func (rc *Reconciler) due(id string, now time.Time) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	s, ok := rc.next[id]
	return !ok || !now.Before(s.at)
}

func (rc *Reconciler) backoff(id string, now time.Time) { rc.backoffAtLeast(id, now, 0) }

// maxRetryAfter caps an upstream's Retry-After hint.
const maxRetryAfter = fencegate.MaxRetryAfter

// backoffAtLeast doubles id's delay (1 s to 1 min) and waits at least
// hint (capped at maxRetryAfter) before the next attempt.
func (rc *Reconciler) backoffAtLeast(id string, now time.Time, hint time.Duration) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.next == nil {
		rc.next = make(map[string]retryState)
	}
	s := rc.next[id]
	s.delay = min(max(2*s.delay, time.Second), time.Minute)
	s.at = now.Add(max(s.delay, min(hint, maxRetryAfter)))
	rc.next[id] = s
}

// prune drops retry state of receipts no longer waiting (settled elsewhere).
func (rc *Reconciler) prune(waiting []fencegate.Receipt) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.next) == 0 {
		return
	}
	keep := make(map[string]bool, len(waiting))
	for _, r := range waiting {
		keep[r.ID] = true
	}
	for id := range rc.next {
		if !keep[id] {
			delete(rc.next, id)
		}
	}
}

func (rc *Reconciler) forget(id string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	delete(rc.next, id)
}

// orphanAt is when a PENDING receipt is taken for an orphan (its process
// gone): Orphan after its creation, and never before its LandBy (plus
// fencegate.LandBySlack), the deadline the admitting gateway gave its
// effect, which may be later than this gateway's own effectTimeout would
// make it: until then the admitting gateway may still be sending it, and
// an API call resent beside it would rely on the upstream to serialise two
// requests under one key.
func (rc *Reconciler) orphanAt(r fencegate.Receipt) time.Time {
	at := r.CreatedAt.Add(rc.orphan())
	if !r.LandBy.IsZero() {
		if lb := r.LandBy.Add(fencegate.LandBySlack); lb.After(at) {
			at = lb
		}
	}
	return at
}

// EffectExpiry is when every request of r's effect expires at the store:
// the receipt's LandBy, set at admission to the admitting gateway's
// effectTimeout after it (so every replica, whatever its own effectTimeout,
// and this one after a restart with another, counts from the deadline the
// effect was sent with); for a receipt admitted without one, effectTimeout
// after its creation. The gateway sends it with each object write
// (fencegate.WithLandBy) and the store refuses a request that reaches it
// later; ObjectResolver takes a write for not applied only a grace after
// it. This pair is the one rule that lets "NOT_APPLIED" be final for a
// write that may still be in the network.
func EffectExpiry(r fencegate.Receipt, effectTimeout time.Duration) time.Time {
	return r.Expiry(effectTimeout)
}
