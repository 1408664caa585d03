package registry

import (
	"context"
	"time"

	"github.com/fencegate/fencegate"
)

// Every mutation of the backend carries a guard (fencegate.Guard): the
// marker and revision this registry has seen, which the backend checks as
// the first step of the mutation's own transaction. A refusal is a
// coordination state loss, found here (lostOnGuard) and handled by the
// recovery (recovery.go).

// checkedFirst runs Check if it has not run yet (a caller that mutates
// before calling it): every mutation's guard is what Check loads and
// compares, and a mutation before it, unguarded, would move a restored
// backend's revision and could hide the restore from it. A loss it finds is
// no error here: the guard and the pause take it from there.
func (r *Registry) checkedFirst(ctx context.Context) error {
	r.rec.mu.Lock()
	confirmed := r.rec.confirmed
	r.rec.mu.Unlock()
	if confirmed {
		return nil
	}
	if err := r.Check(ctx); err != nil && fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		return err
	}
	return nil
}

// guard returns what an acquire's backend must show, resuming a paused
// registry first; COORDINATION_STATE_LOST while paused, or while new grants
// are held after a start without memory (recovery.hold).
func (r *Registry) guard(ctx context.Context, now time.Time) (fencegate.Guard, error) {
	if err := r.checkedFirst(ctx); err != nil {
		return fencegate.Guard{}, err
	}
	if r.rec.paused.Load() {
		r.rec.run.Lock()
		err := r.resumeLocked(ctx, now, true)
		r.rec.run.Unlock()
		if err != nil {
			return fencegate.Guard{}, err
		}
	}
	if err := r.holdErr(now); err != nil {
		return fencegate.Guard{}, err
	}
	return r.seenGuard(), nil
}

// seenGuard is the marker and highest revision this registry has seen, which
// every mutation's backend must still show (none before Check has run).
// Renewals and releases carry it without resuming a pause: they issue no
// fence, and a lease from before a loss reads REVOKED whatever they do.
func (r *Registry) seenGuard() fencegate.Guard {
	r.rec.mu.Lock()
	defer r.rec.mu.Unlock()
	if !r.rec.checked {
		return fencegate.Guard{}
	}
	return fencegate.Guard{Incarnation: r.rec.seen.ID, MinRevision: r.rec.seen.Revision}
}

// observe records an issued lease's revision and fence as seen.
func (r *Registry) observe(l fencegate.Lease) {
	r.rec.mu.Lock()
	r.rec.seen.Revision = max(r.rec.seen.Revision, l.Revision)
	r.rec.seen.HighestFence = max(r.rec.seen.HighestFence, l.FenceToken)
	r.rec.mu.Unlock()
}

// observeBackend raises what this registry has seen to the backend's
// revision and highest fence, read after a renewal, release or floor it
// made there (under the marker it has seen only): the guard of the next
// mutation, and the next check, then find a backend restored from before
// that change behind what was seen, as they find one restored from before
// an acquisition. Without it a lost release read HELD again, a lost
// renewal let the resource go to another owner while the renewal's HELD
// proof lived, and a lost floor let a fence below it be issued, none of
// them found. A failed read leaves seen as it is (the change stands; only
// its loss could go unseen).
func (r *Registry) observeBackend(ctx context.Context) {
	inc, err := r.backend.Incarnation(ctx)
	if err != nil {
		return
	}
	r.rec.mu.Lock()
	if r.rec.checked && inc.ID == r.rec.seen.ID {
		r.rec.seen.Revision = max(r.rec.seen.Revision, inc.Revision)
		r.rec.seen.HighestFence = max(r.rec.seen.HighestFence, inc.HighestFence)
	}
	r.rec.mu.Unlock()
}

// underGuard runs mutate under the guard guard() returns and handles the
// backend's guard refusing it (lostOnGuard). A mutation that read its guard
// before this registry adopted another marker (its own claim ending a pause,
// or a join), and reached the backend after, is refused for that marker, not
// for a new loss: it runs once more under guard() (which may refuse, e.g. an
// acquire while grants are paused).
func (r *Registry) underGuard(ctx context.Context, now time.Time, guard func() (fencegate.Guard, error), mutate func(fencegate.Guard) error) error {
	g, err := guard()
	if err != nil {
		return err
	}
	for retried := false; ; retried = true {
		err = mutate(g)
		if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
			return err
		}
		if testHookBeforeLost != nil {
			testHookBeforeLost()
		}
		left, err := r.lostOnGuard(ctx, err, g, now)
		if !left || retried {
			return err
		}
		if g, err = guard(); err != nil {
			return err
		}
	}
}

// testHookBeforeLost, set only by tests (export_test.go), runs between a
// guard's refusal and lostOnGuard.
var testHookBeforeLost func()

// mutationGuard is the guard of a renew, release or prune: Check first if
// it has not run (checkedFirst), then what this registry has seen, without
// resuming a pause (seenGuard).
func (r *Registry) mutationGuard(ctx context.Context) func() (fencegate.Guard, error) {
	return func() (fencegate.Guard, error) {
		if err := r.checkedFirst(ctx); err != nil {
			return fencegate.Guard{}, err
		}
		return r.seenGuard(), nil
	}
}

// lostOnGuard handles COORDINATION_STATE_LOST from the backend's guard g
// (of an acquire, renew, release or prune). A refusal of a marker this registry has
// left since (a claim or join ended between the guard's read and here; a
// claim in progress is waited out, as it holds run) is no loss: left is true,
// and the caller runs the mutation once more under the new marker. A refusal
// while the registry is paused for a loss not yet claimed is that loss's: it
// is answered paused without moving the recovery on, which reads the backend
// and the fence store, so that clients renewing through a pause (renewals
// carry the pre-loss guard until the claim) do not run it once each;
// acquires, Watch and the operator's floor move it on. Any other refusal is a
// new loss.
func (r *Registry) lostOnGuard(ctx context.Context, cause error, g fencegate.Guard, now time.Time) (left bool, err error) {
	r.rec.run.Lock()
	defer r.rec.run.Unlock()
	if r.seenGuard().Incarnation != g.Incarnation {
		return true, fencegate.Errorf(fencegate.CodeStateLost,
			"the coordination backend's incarnation changed again while this request ran; retry")
	}
	if !r.detectLocked(ctx, fencegate.ErrorMessage(cause), now) {
		return false, r.pausedErr("the coordination backend refused this registry's guard for it")
	}
	err = r.resumeLocked(ctx, now, true)
	if err == nil { // cannot happen with a positive status life; stay safe
		err = r.pausedErr("retry")
	}
	return false, err
}

// preLoss reports whether a lease's status must read REVOKED: grants are
// paused after a loss, or the lease was issued before the backend's claim.
func (r *Registry) preLoss(l fencegate.Lease) bool {
	return r.rec.paused.Load() || l.Revision < r.rec.since.Load()
}
