package registry

import (
	"context"
	"math"

	"github.com/fencegate/fencegate"
)

// MaxFloor is the highest floor a registry accepts: one that leaves at
// least fencegate.MinFenceHeadroom fences (backends with a narrower range
// refuse lower ones).
const MaxFloor = math.MaxUint64 - fencegate.MinFenceHeadroom

// SetFloor makes every later fence of every resource greater than floor; a
// floor below the current one changes nothing. A floor above MaxFloor (or
// the backend's own limit) is INVALID_REQUEST. While grants are paused after
// a loss and the registry has no fence store to ask, the floor is what they
// resume above (with every fence known here). A floor whose guard finds the
// backend behind what this registry saw starts that recovery and is kept
// for it, like one set while paused. Every floor is logged, here only: a
// WARN when it is raised above the highest fence this registry knows, an
// INFO naming both when it is not (the backend keeps the higher floor).
func (r *Registry) SetFloor(ctx context.Context, floor uint64) error {
	if floor > MaxFloor {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "floor %d leaves fewer than %d fences: the sequence would run out", floor, uint64(fencegate.MinFenceHeadroom))
	}
	if err := r.checkedFirst(ctx); err != nil {
		return err
	}
	r.rec.run.Lock()
	defer r.rec.run.Unlock()
	rc := &r.rec
	rc.mu.Lock()
	pending, known := rc.lost && !rc.claimed, rc.seen.HighestFence
	rc.mu.Unlock()
	if !pending {
		switch err := r.backend.SetFloor(ctx, floor, r.seenGuard()); {
		case err == nil:
			rc.mu.Lock()
			rc.seen.HighestFence = max(rc.seen.HighestFence, floor)
			rc.mu.Unlock()
			r.observeBackend(ctx)
			// Kept in Memory before it is answered, as an acquisition is: a
			// restart on a backend restored from before the floor finds it
			// behind what was seen.
			if err := r.Remember(); err != nil {
				return err
			}
			if floor > known {
				r.log.Warn("fence floor raised by an operator above every fence known", "floor", floor, "previousHighWater", known)
			} else {
				// The backend keeps the higher floor: not raised above a
				// fence known here (nothing at all at or below its own).
				r.log.Info("fence floor not raised above the highest fence known", "requested", floor, "highWater", known)
			}
			return nil
		case fencegate.ErrorCode(err) != fencegate.CodeStateLost:
			return backendErr(err)
		default:
			// The floor's own guard found the backend behind what this
			// registry saw: a loss, whose recovery the floor is kept for.
			r.markLostLocked(fencegate.ErrorMessage(err), r.now())
		}
	}
	rc.mu.Lock()
	prev := rc.opFloor
	rc.opFloor = max(rc.opFloor, floor)
	rc.mu.Unlock()
	r.log.Warn("operator floor set for the recovery from a coordination state loss", "floor", floor)
	// The epoch is retired at detection or, for a loss this floor found, by
	// the next acquire or watch tick; never call the hook from here (an
	// operator path may hold its own locks).
	if err := r.resumeLocked(ctx, r.now(), false); err != nil && fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		if fencegate.ErrorCode(err) == fencegate.CodeInvalidRequest {
			rc.mu.Lock()
			rc.opFloor = prev // a refused floor changes nothing
			rc.mu.Unlock()
		}
		return err
	}
	return nil
}
