package registry

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
)

// Issuance is the registry's issuing state as operators see it.
type Issuance struct {
	// Paused: grants are refused with COORDINATION_STATE_LOST, after a loss
	// or, without DetectedAt, while new grants are held after a start
	// without memory of the backend's marker (recovery.hold; renewals and
	// status reads go on, and no lease reads REVOKED for it).
	Paused bool   `json:"paused"`
	Reason string `json:"reason,omitempty"`
	// DetectedAt is when the loss was found; ResumeAt is the earliest
	// instant grants resume (every status proof signed before the loss has
	// expired by then).
	DetectedAt *time.Time `json:"detectedAt,omitempty"`
	ResumeAt   *time.Time `json:"resumeAt,omitempty"`
	// NeedsFloor: the registry has no fence store to ask for the gateways'
	// highest fence; an operator must set a floor at or above it.
	NeedsFloor bool `json:"needsFloor,omitempty"`
	// Incarnation is the backend's marker this registry issues under.
	Incarnation string `json:"incarnation"`
	// HighWater is the highest fence known here: issued by this registry,
	// held by the backend, or (when a fence store is configured) accepted by
	// a gateway. A safe floor is at or above it.
	HighWater uint64 `json:"highWater"`
	// Losses counts the losses detected since start.
	Losses uint64 `json:"losses"`
}

// recovery is the registry's view of its backend's incarnation and the
// pause that follows a detected loss. mu guards the fields; run serialises
// detection and resumption, which call the backend and the retirement hook
// without holding mu.
type recovery struct {
	run     sync.Mutex
	mu      sync.Mutex
	checked bool // a Check has begun (Memory loaded): mutations carry the guard it keeps
	loaded  bool // Memory was loaded (once per process)
	// confirmed: a Check has ended without a fault (or found a loss);
	// until then every mutation runs one first (checkedFirst), waiting for
	// one in flight rather than going on beside it.
	confirmed bool
	seen      fencegate.Incarnation // marker and Since adopted; highest revision and fence seen
	lost      bool
	retired   bool // the pre-loss epoch was retired (OnLoss succeeded)
	claimed   bool // a new marker was written above the high-water mark
	reason    string
	detect    time.Time
	resume    time.Time
	// epoch is the issuer epoch signing when the loss was found: the one
	// OnLoss retires, on every try (a rotation between tries does not move
	// it onto the new epoch).
	epoch   uint64
	opFloor uint64
	// hold: new grants are refused until then, renewals and status reads
	// go on. A registry that starts without memory of the backend's marker
	// (a new replica, a lost memory file) and finds one claimed after a
	// loss (generation 2 or more) cannot tell whether the claim's pause has
	// ended: the claiming registry may be inside it, with HELD proofs
	// signed before the loss still alive. It waits one pause from its start
	// check, as long as the claim's own pause, without the loss pause's
	// REVOKED state (leases issued under the marker are legitimate).
	hold time.Time
	// paused mirrors lost for the hot paths; since mirrors seen.Since.
	paused atomic.Bool
	since  atomic.Uint64
	losses atomic.Uint64
	// save serialises saves to Memory; saved is the last one saved.
	save  sync.Mutex
	saved fencegate.Incarnation
}

// Check compares the backend's incarnation with what this registry saw
// last (Memory, and earlier calls) and with the fence store's high-water
// mark. A first start on an empty backend claims it; a backend whose marker
// is missing or changed, whose revision went back, or whose highest fence
// is below a fence already issued or accepted has lost state: grants pause
// (COORDINATION_STATE_LOST) until issuance can continue above every known
// fence. Call it before serving (a mutation before it runs it first); an
// unreachable backend is an error, not a loss.
func (r *Registry) Check(ctx context.Context) error { return r.check(ctx, true) }

// Watch is Check without asking the fence store (whose high-water read may
// scan every resource): the backend's marker, revision and highest fence
// against what this registry saw, for periodic use while serving. When it
// finds no loss it then prunes one batch of lease records past retention
// (prune), so they stay bounded without acquisitions.
func (r *Registry) Watch(ctx context.Context) error {
	if err := r.check(ctx, false); err != nil {
		return err
	}
	return r.prune(ctx)
}

func (r *Registry) check(ctx context.Context, full bool) (err error) {
	r.rec.run.Lock()
	defer r.rec.run.Unlock()
	// Read in causal order: what this registry saw (it only grows as acquires
	// return), then what gateways accepted (only fences issued before), then
	// the backend. Reading the backend first would let an acquire or a write
	// that lands in between look like a rollback.
	rc := &r.rec
	rc.mu.Lock()
	if !rc.loaded && r.memory != nil {
		mem, err := r.memory.Load()
		if err != nil {
			rc.mu.Unlock()
			return fencegate.Wrap(err, fencegate.CodeInternal, "load the registry's incarnation memory")
		}
		rc.loaded = true
		rc.seen = mem.Incarnation
		if now := r.now(); now.Before(mem.ResumeAt) {
			// Restarted during the pause after a loss this registry found,
			// claimed and retired: the pause goes on until its end, and
			// leases from before the claim (a backend restored with them)
			// read REVOKED after it as before the restart (preLoss).
			rc.lost, rc.retired, rc.claimed, rc.detect, rc.resume = true, true, true, now, mem.ResumeAt
			rc.reason = "restarted during the pause after a coordination state loss"
			rc.paused.Store(true)
			rc.since.Store(mem.Since)
		}
		if now := r.now(); now.Before(mem.HoldUntil) {
			rc.hold = mem.HoldUntil // restarted during the hold: it goes on
		}
	}
	// Until a check has ended without a fault, every mutation runs one
	// first (checkedFirst): a check that failed reading the fence store or
	// the backend compared nothing, and a mutation after it would carry no
	// guard. One that found a loss did its work: the pause and the guard
	// take it from there.
	defer func() {
		if err == nil || fencegate.ErrorCode(err) == fencegate.CodeStateLost {
			rc.mu.Lock()
			rc.confirmed = true
			rc.mu.Unlock()
		}
	}()
	rc.checked = true
	seen, lost := rc.seen, rc.lost
	rc.mu.Unlock()
	var hw uint64
	if full {
		var err error
		if hw, err = r.highWater(ctx); err != nil {
			return err
		}
	}
	inc, err := r.backend.Incarnation(ctx)
	if err != nil {
		return backendErr(err)
	}
	if lost {
		return r.resumeLocked(ctx, r.now(), true)
	}
	if inc == (fencegate.Incarnation{}) && seen == (fencegate.Incarnation{}) && hw == 0 {
		// A first start: nothing was ever issued or accepted. A registry
		// sharing the backend may claim it first; then adopt its marker.
		err := r.claimLocked(ctx, "", 0)
		if fencegate.ErrorCode(err) != fencegate.CodeStateLost {
			return err
		}
		if inc, err = r.backend.Incarnation(ctx); err != nil {
			return backendErr(err)
		}
	}
	if reason := diagnose(inc, seen, hw); reason != "" {
		r.detectLocked(ctx, reason, r.now())
		return r.resumeLocked(ctx, r.now(), true)
	}
	rc.mu.Lock()
	// Merge with what is seen now, not with the copy read above: an acquire
	// that returned since then has raised it, and forgetting that would let
	// a rollback to the backend read above pass unnoticed.
	cur := rc.seen
	var hold time.Time
	if cur.ID == "" && markerGen(inc.ID) >= 2 {
		// No memory of a marker claimed after a loss: hold new grants one
		// pause, in case its claimer is still inside its own (hold).
		hold = r.now().Add(r.statusLife + fencegate.MaxClockSkew)
		if hold.After(rc.hold) {
			rc.hold = hold
		}
	}
	rc.seen = fencegate.Incarnation{ID: inc.ID, Since: inc.Since, Revision: max(cur.Revision, inc.Revision),
		HighestFence: max(cur.HighestFence, inc.HighestFence)}
	rc.since.Store(inc.Since)
	rc.mu.Unlock()
	if !hold.IsZero() {
		r.log.Warn("started without memory of the coordination backend's incarnation, claimed after a loss: new grants held until every status proof signed before it has expired",
			"incarnation", inc.ID, "holdUntil", hold)
	}
	return r.Remember()
}

// diagnose names the loss inc shows against what was seen and accepted, or
// returns "" when there is none.
func diagnose(inc, seen fencegate.Incarnation, hw uint64) string {
	switch {
	case inc.ID == "":
		return "the backend carries no incarnation marker: it was emptied, replaced or restored from before its first claim"
	case seen.ID != "" && olderMarker(inc.ID, seen.ID):
		return fmt.Sprintf("the backend carries incarnation %q, older than %q this registry last issued under: it was restored from a backup taken before an earlier claim", inc.ID, seen.ID)
	case seen.ID != "" && inc.ID != seen.ID:
		return fmt.Sprintf("the backend carries incarnation %q, this registry last issued under %q: it was switched or replaced", inc.ID, seen.ID)
	case inc.Revision < seen.Revision:
		return fmt.Sprintf("the backend's revision went back from %d to %d: it was restored from an older copy", seen.Revision, inc.Revision)
	case seen.HighestFence > inc.HighestFence:
		return fmt.Sprintf("this registry issued fence %d, the backend's highest is %d: fences were lost", seen.HighestFence, inc.HighestFence)
	case hw > inc.HighestFence:
		return fmt.Sprintf("gateways accepted fence %d, the backend's highest is %d: fences were lost", hw, inc.HighestFence)
	}
	return ""
}

// highWater asks the fence store for the highest accepted fence; 0 without one.
func (r *Registry) highWater(ctx context.Context) (uint64, error) {
	if r.fences == nil {
		return 0, nil
	}
	hw, err := r.fences.HighestFence(ctx)
	if err != nil {
		return 0, backendErr(err)
	}
	return hw, nil
}

// detectLocked enters the pause (once per loss): logged, counted, and the
// issuer epoch that signed pre-loss grants is retired. It reports false when
// the registry was already paused for a loss not yet claimed (markLostLocked).
// The caller holds run.
func (r *Registry) detectLocked(ctx context.Context, reason string, now time.Time) bool {
	if !r.markLostLocked(reason, now) {
		return false
	}
	r.retireLocked(ctx)
	return true
}

// markLostLocked enters the pause without retiring the epoch (logged and
// counted); false if it was already paused for a loss not yet claimed. A loss
// found while paused after this registry's claim (or join) is a new one, of
// the claimed incarnation: the pause starts over, with its own retirement,
// claim and proof life. The caller holds run.
func (r *Registry) markLostLocked(reason string, now time.Time) bool {
	rc := &r.rec
	rc.mu.Lock()
	if rc.lost && !rc.claimed {
		rc.mu.Unlock()
		return false
	}
	// The pause runs from the detection, not from the start of the request
	// that found the loss (its backend call may have stalled meanwhile),
	// and lasts one status proof life plus the clock skew a gateway
	// tolerates: a HELD proof issued before the loss is dead everywhere by
	// then.
	detected := r.now()
	if detected.Before(now) {
		detected = now
	}
	rc.lost, rc.retired, rc.claimed, rc.reason, rc.detect = true, false, false, reason, detected
	rc.epoch = r.IssuerEpoch()
	// An operator floor bounds the fences known at the loss it was set
	// for; a new loss needs its own (another registry may have issued
	// above the old one since).
	rc.opFloor = 0
	rc.resume = detected.Add(r.statusLife + fencegate.MaxClockSkew)
	rc.paused.Store(true)
	rc.mu.Unlock()
	rc.losses.Add(1)
	r.log.Error("coordination state lost: grants paused until issuance can continue above every known fence",
		"reason", reason, "resumeAt", rc.resume, "epoch", r.IssuerEpoch())
	return true
}

// retireLocked calls the retirement hook until it succeeds once per loss.
func (r *Registry) retireLocked(ctx context.Context) bool {
	rc := &r.rec
	rc.mu.Lock()
	done, epoch := rc.retired, rc.epoch
	rc.mu.Unlock()
	if done {
		return true
	}
	if r.onLoss != nil {
		if err := r.onLoss(ctx, epoch); err != nil {
			r.log.Error("retiring the pre-loss issuer epoch failed; grants stay paused", "epoch", epoch, "err", err)
			return false
		}
	}
	rc.mu.Lock()
	rc.retired = true
	rc.mu.Unlock()
	r.log.Warn("pre-loss issuer epoch retired", "epoch", epoch, "newEpoch", r.IssuerEpoch())
	return true
}

// resumeLocked moves a paused registry on as far as it can: retire the old
// epoch (if retire), claim the backend above the high-water mark, and end the
// pause once every pre-loss status proof has expired. It returns
// COORDINATION_STATE_LOST while grants stay paused, also when the backend
// refuses the operator's floor, except to SetFloor (retire false), which
// answers that refusal. The caller holds run.
func (r *Registry) resumeLocked(ctx context.Context, now time.Time, retire bool) error {
	rc := &r.rec
	rc.mu.Lock()
	lost, retired, claimed, seen, opFloor := rc.lost, rc.retired, rc.claimed, rc.seen, rc.opFloor
	rc.mu.Unlock()
	if !lost {
		return nil
	}
	if !retired && (!retire || !r.retireLocked(ctx)) {
		return r.pausedErr("the pre-loss issuer epoch is not retired yet")
	}
	if !claimed {
		inc, err := r.backend.Incarnation(ctx)
		if err != nil {
			return backendErr(err)
		}
		hw, err := r.highWater(ctx)
		if err != nil {
			return err
		}
		known := max(hw, seen.HighestFence, inc.HighestFence)
		if r.fences == nil && opFloor == 0 {
			return r.pausedErr(fmt.Sprintf("no fence store to ask for the gateways' highest fence: an operator must set a floor "+
				"(POST /v1/admin/floor) at or above it; the highest fence known here is %d", known))
		}
		if err := r.claimOrJoinLocked(ctx, inc, seen, max(known, opFloor)); err != nil {
			if fencegate.ErrorCode(err) == fencegate.CodeInvalidRequest && opFloor > known {
				// The backend refuses the operator's floor (above its own
				// range): forget it, so that grants wait for another
				// floor rather than retrying this one for good.
				rc.mu.Lock()
				if rc.opFloor == opFloor {
					rc.opFloor = 0
				}
				rc.mu.Unlock()
				r.log.Error("operator floor refused by the backend; set another", "floor", opFloor, "err", err)
				if retire {
					// An acquisition or a tick, not the operator's SetFloor
					// (whose own answer is this refusal): grants stay
					// paused, as for a floor never set.
					return r.pausedErr(fmt.Sprintf("the operator's floor %d was refused by the backend (%s): set another", opFloor, fencegate.ErrorMessage(err)))
				}
			}
			return err
		}
	}
	if now.Before(rc.resume) {
		return r.pausedErr(fmt.Sprintf("grants resume at %s, when every status proof signed before the loss has expired", rc.resume.Format(time.RFC3339Nano)))
	}
	rc.mu.Lock()
	rc.lost = false
	rc.paused.Store(false)
	rc.mu.Unlock()
	r.log.Info("grants resumed after a coordination state loss", "incarnation", r.Issuance().Incarnation, "floor", r.Issuance().HighWater)
	return nil
}

// claimOrJoinLocked continues above floor. A backend carrying no marker, the
// marker this registry issued under (a rollback), or a marker of an earlier
// generation than that one (a backup from before an earlier claim, restored)
// gets a new one; so does any marker when this registry remembers none (a
// new replica, or one whose memory file was lost): with nothing to compare,
// the marker of a restored backup cannot be told from a peer's claim, and
// joining it would let the leases restored with it read HELD. One carrying another marker of the same or a later
// generation was claimed by another registry sharing it: this registry joins
// it, raising the floor to what it knows, instead of claiming again, so
// registries sharing a backend never take turns detecting each other's
// claims.
func (r *Registry) claimOrJoinLocked(ctx context.Context, inc, seen fencegate.Incarnation, floor uint64) error {
	if inc.ID == "" || seen.ID == "" || inc.ID == seen.ID || olderMarker(inc.ID, seen.ID) {
		return r.claimLocked(ctx, inc.ID, floor)
	}
	if err := r.backend.SetFloor(ctx, floor, fencegate.Guard{Incarnation: inc.ID, MinRevision: inc.Revision}); err != nil {
		return backendErr(err)
	}
	now, err := r.backend.Incarnation(ctx)
	if err != nil {
		return backendErr(err)
	}
	if now.ID != inc.ID {
		return fencegate.Errorf(fencegate.CodeStateLost, "the backend's incarnation changed again while joining it")
	}
	r.adopt(now, floor)
	r.log.Warn("joined the coordination backend's incarnation claimed elsewhere", "incarnation", now.ID, "floor", floor)
	return r.Remember()
}

// adopt makes inc the incarnation this registry issues under.
func (r *Registry) adopt(inc fencegate.Incarnation, floor uint64) {
	rc := &r.rec
	rc.mu.Lock()
	rc.seen = fencegate.Incarnation{ID: inc.ID, Since: inc.Since, Revision: inc.Revision,
		HighestFence: max(inc.HighestFence, floor, rc.seen.HighestFence)}
	rc.claimed, rc.checked = true, true
	rc.since.Store(inc.Since)
	rc.mu.Unlock()
}

// claimLocked writes a new marker over prev with the floor raised to floor,
// and adopts it. The marker's generation is one above prev's and the one
// this registry issued under. The caller holds run.
func (r *Registry) claimLocked(ctx context.Context, prev string, floor uint64) error {
	r.rec.mu.Lock()
	last := r.rec.seen.ID
	r.rec.mu.Unlock()
	id := newMarker(max(markerGen(prev), markerGen(last)) + 1)
	inc, err := r.backend.Claim(ctx, prev, id, floor)
	if err != nil {
		return backendErr(err)
	}
	r.adopt(inc, floor)
	r.log.Warn("coordination backend claimed", "incarnation", id, "previous", prev, "floor", floor, "revision", inc.Revision)
	return r.Remember()
}

// AfterLoss reports whether grants are paused after a coordination state
// loss (what fencegate_registry_grants_paused shows, and pages on), not only
// held after a start without memory, which is no loss.
func (is Issuance) AfterLoss() bool { return is.Paused && is.DetectedAt != nil }

// holdErr is COORDINATION_STATE_LOST while new grants are held (hold) at
// now, else nil.
func (r *Registry) holdErr(now time.Time) error {
	r.rec.mu.Lock()
	hold, id := r.rec.hold, r.rec.seen.ID
	r.rec.mu.Unlock()
	if !now.Before(hold) {
		return nil
	}
	return fencegate.Errorf(fencegate.CodeStateLost, "grants are held: %s; grants resume at %s", holdReason(id), hold.Format(time.RFC3339Nano))
}

func holdReason(id string) string {
	return fmt.Sprintf("this registry started without memory of the backend's incarnation %q, claimed after a coordination state loss, "+
		"and waits until every status proof signed before that loss has expired", id)
}

func (r *Registry) pausedErr(why string) error {
	r.rec.mu.Lock()
	reason := r.rec.reason
	r.rec.mu.Unlock()
	return fencegate.Errorf(fencegate.CodeStateLost, "grants are paused: %s; %s", reason, why)
}

// Issuance reports the issuing state.
func (r *Registry) Issuance() Issuance {
	rc := &r.rec
	rc.mu.Lock()
	defer rc.mu.Unlock()
	is := Issuance{Paused: rc.lost, Incarnation: rc.seen.ID, HighWater: max(rc.seen.HighestFence, rc.opFloor),
		Losses: rc.losses.Load()}
	if rc.lost {
		d, res := rc.detect, rc.resume
		is.Reason, is.DetectedAt, is.ResumeAt = rc.reason, &d, &res
		is.NeedsFloor = r.fences == nil && !rc.claimed && rc.opFloor == 0
	} else if hold := rc.hold; r.now().Before(hold) {
		is.Paused, is.Reason, is.ResumeAt = true, holdReason(rc.seen.ID), &hold
	}
	return is
}

var discard = slog.New(slog.DiscardHandler)
