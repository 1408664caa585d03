package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/fencegate/fencegate/domain"
)

// errDeadline is the cause of OWNERSHIP_UNKNOWN after a pause past the TTL.
var errDeadline = domain.Errorf(domain.CodeLeaseNotHeld, "local deadline passed without a confirmed renewal")

// Tick advances the state machine to the client's clock. In HELD past the
// local deadline it only records OWNERSHIP_UNKNOWN (no request); in HELD past
// the renewal point it renews (RENEWING); in OWNERSHIP_UNKNOWN it tries a
// renewal, the only way back to HELD. While a renewal is in flight, a Tick
// past the local deadline records OWNERSHIP_UNKNOWN, and the renewing Tick
// has one made at the deadline. A renewal cut short by ctx's deadline went
// unanswered in time and is uncertain (OWNERSHIP_UNKNOWN); one the caller
// cancelled (context.Canceled) leaves the lease as it was, bounded by its
// local deadline. It returns the renewal's error, if any.
func (l *Lease) Tick(ctx context.Context) error {
	l.mu.Lock()
	now := l.c.now()
	switch {
	case l.renewing:
		l.deadlineWhileRenewingLocked(now)
		l.unlock()
		return nil
	case l.state.Terminal(), l.state == StateRequested:
		l.unlock()
		return nil
	case l.state == StateHeld && !now.Before(l.deadline):
		l.toUnknown(errDeadline)
		l.unlock()
		return nil
	case l.state == StateHeld && now.Before(l.renewAt):
		l.unlock()
		return nil
	}
	if err := ctx.Err(); err != nil {
		// Ended before anything was sent: nothing learned, nothing changed.
		l.unlock()
		return err
	}
	if l.state == StateHeld {
		l.set(StateRenewing, nil)
	}
	l.renewing = true
	id, deadline := l.info.Lease, l.deadline
	l.unlock()

	// Run is inside this Tick while the renewal is in flight: a watchdog
	// ticks at the local deadline, so that a hanging renewal does not keep
	// Lost open past it.
	wctx, stop := context.WithCancel(context.Background())
	if now.Before(deadline) {
		go func() {
			if l.c.sleep(wctx, deadline.Sub(now)) != nil || wctx.Err() != nil {
				return // the renewal was answered first
			}
			l.mu.Lock()
			l.deadlineWhileRenewingLocked(l.c.now())
			l.unlock()
		}()
	}
	info, err := l.c.Renew(ctx, id, l.p.TTL)
	stop()

	l.mu.Lock()
	defer l.unlock()
	l.renewing = false
	if l.state.Terminal() {
		return err
	}
	switch code := domain.ErrorCode(err); {
	case err == nil:
		l.adopt(info, now)
		return l.notHeldLocked()
	case code == domain.CodeLeaseNotHeld || code == domain.CodeNotFound:
		l.terminate(StateExpired, err) // the registry confirmed it
	case code == domain.CodeEpochRevoked:
		l.terminate(StateRevoked, err)
	case cancelledByCaller(ctx):
		// The caller gave up, not the registry (as in Refresh): a renewal
		// that may have landed only lengthens the lease, so it stays as it
		// was, bounded by its local deadline. A deadline that passed
		// (the caller's or a timeout's) is a renewal the registry did not
		// answer in time: uncertain, OWNERSHIP_UNKNOWN (default).
		switch {
		case !l.c.now().Before(l.deadline):
			l.toUnknown(errDeadline)
		case l.state == StateRenewing:
			l.set(StateHeld, nil)
		}
	default:
		l.toUnknown(err)
	}
	return err
}

// cancelledByCaller reports whether ctx was cancelled by its caller
// (context.Canceled), as opposed to a deadline that passed
// (context.DeadlineExceeded). Only a cancellation says that the caller gave
// up and nothing was learned; a request cut short by a deadline went
// unanswered in time, which is an uncertain answer.
func cancelledByCaller(ctx context.Context) bool { return errors.Is(ctx.Err(), context.Canceled) }

// deadlineWhileRenewingLocked records OWNERSHIP_UNKNOWN (Lost closes) when
// the local deadline has passed while a renewal is in flight (and may hang),
// without waiting for its answer, which may still bring the lease back to
// HELD. l.mu is held.
func (l *Lease) deadlineWhileRenewingLocked(now time.Time) {
	if l.renewing && l.state == StateRenewing && !now.Before(l.deadline) {
		l.toUnknown(errDeadline)
	}
}

// Run calls Tick on a timer until ctx ends or the lease is terminal. It
// returns nil after a release, the cause for other terminal states, and
// ctx's error when cancelled.
func (l *Lease) Run(ctx context.Context) error {
	for {
		_ = l.Tick(ctx)
		l.mu.Lock()
		st, cause, wait := l.state, l.cause, l.nextWakeLocked()
		l.unlock()
		if st.Terminal() {
			if st == StateReleased {
				return nil
			}
			return cause
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// nextWakeLocked is how long Run waits before the next Tick.
func (l *Lease) nextWakeLocked() time.Duration {
	if l.state != StateHeld && l.state != StateRenewing {
		return l.p.RetryWait
	}
	now := l.c.now()
	d := minTime(l.renewAt, l.deadline).Sub(now)
	if d < 10*time.Millisecond {
		d = 10 * time.Millisecond
	}
	return d
}

// proofLife reads iat and exp from a grantStatus.v1 compact JWS payload,
// without verifying it (the gateway verifies), to bound the proof's life on
// the local clock.
func proofLife(token string) (time.Duration, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return 0, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return 0, false
	}
	var st domain.Status
	if json.Unmarshal(b, &st) != nil || st.ExpiresAtMs <= st.IssuedAtMs {
		return 0, false
	}
	return time.Duration(st.ExpiresAtMs-st.IssuedAtMs) * time.Millisecond, true
}
