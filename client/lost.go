package client

import (
	"context"
	"fmt"

	"github.com/fencegate/fencegate/domain"
)

// stateChange is one transition still to be reported to OnStateChange.
type stateChange struct {
	from, to State
	cause    error
}

// set moves the lease to s with cause; l.mu is held. Leaving HELD and
// RENEWING closes the Lost channel; coming back to HELD (a confirmed
// renewal out of OWNERSHIP_UNKNOWN) opens a fresh one.
func (l *Lease) set(s State, cause error) {
	from := l.state
	l.state, l.cause = s, cause
	if from == s {
		return
	}
	live := s == StateHeld || s == StateRenewing
	select {
	case <-l.lost:
		if live {
			l.lost = make(chan struct{})
		}
	default:
		if !live && s != StateRequested {
			close(l.lost)
		}
	}
	if l.p.OnStateChange != nil {
		l.changes = append(l.changes, stateChange{from: from, to: s, cause: cause})
	}
}

// unlock releases l.mu and then reports the changes made under it, unless
// a commit holds commitSem: then the commit reports them once it has released
// it (unlockCommit), so that a callback may write, delegate or read
// NextSegment.
func (l *Lease) unlock() {
	if l.committing {
		l.mu.Unlock()
		return
	}
	changes := l.changes
	l.changes = nil
	l.mu.Unlock()
	l.report(changes)
}

// lockCommit takes commitSem for a whole commit (numbering follows commit
// order); the state changes made meanwhile wait for unlockCommit.
func (l *Lease) lockCommit() {
	l.commitSem <- struct{}{}
	l.mu.Lock()
	l.committing = true
	l.mu.Unlock()
}

// unlockCommit releases commitSem and then reports, on the committing
// goroutine, the state changes made while it was held.
func (l *Lease) unlockCommit() {
	l.mu.Lock()
	l.committing = false
	changes := l.changes
	l.changes = nil
	l.mu.Unlock()
	<-l.commitSem
	l.report(changes)
}

// waitCommits waits, bounded by ctx, until no commit is in flight. It
// holds no other lock meanwhile: a commit in flight may still take l.mu
// (a status refresh, a state change) and end.
func (l *Lease) waitCommits(ctx context.Context) error {
	select { // free: done, even if ctx has ended
	case l.commitSem <- struct{}{}:
		<-l.commitSem
		return nil
	default:
	}
	select {
	case l.commitSem <- struct{}{}:
		<-l.commitSem
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Lease) report(changes []stateChange) {
	for _, c := range changes {
		l.p.OnStateChange(c.from, c.to, c.cause)
	}
}

// Lost returns a channel that is closed as soon as the lease no longer
// allows new effects: OWNERSHIP_UNKNOWN (a local deadline passed unconfirmed
// — a pause past the TTL —, or an uncertain renewal), EXPIRED, REVOKED,
// LOST or RELEASED. The state changes when the state machine runs (Run,
// Tick, a commit), so a worker that keeps Run going learns it at the local
// deadline. After a confirmed renewal out of OWNERSHIP_UNKNOWN, Lost
// returns a new, open channel; the closed one stays closed.
func (l *Lease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// Context returns a context derived from parent that is cancelled when the
// lease stops allowing new effects (when Lost closes), with the reason as
// its cause (context.Cause): hand it to the work done under the lease so
// that it stops promptly. The returned cancel releases it; call it when the
// work is done.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	lost := l.Lost()
	go func() {
		select {
		case <-lost:
			cancel(l.lostCause())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// lostCause is why the lease allows no new effect (a LEASE_NOT_HELD error
// wrapping the state's cause).
func (l *Lease) lostCause() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &domain.Error{Code: domain.CodeLeaseNotHeld, Err: l.cause,
		Message: fmt.Sprintf("lease %s is %s: stop creating effects", l.info.Lease, l.state)}
}
