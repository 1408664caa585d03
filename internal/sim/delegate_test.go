package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
)

// delegating reports whether the world's workers hand segments to
// delegates (DESIGN §8): seeds 1, 4, 7, ... do; the others keep the course
// they had before delegations were simulated.
func (w *world) delegating() bool { return w.seed%3 == 1 }

// delegateName is the identity of wk's downstream worker.
func (wk *worker) delegateName() string { return wk.name + "-dlg" }

// delegate hands the owner's next one to three segments to its downstream
// worker, as a queue consumer is handed them: the owner mints a delegation
// of its lease for exactly that range, bound to the grant it holds; the
// delegate asks the registry for the delegation's status proof and writes
// the segments in order under the owner's grant, each as the owner would
// retry it (the same body for a segment in doubt). The owner then goes on
// after the last segment written. Now and then the delegate misbehaves: it
// writes past its range, an impostor presents its delegation, or it
// presents another lease's delegation. Those are forgeries and the gate
// "forged accepted" counts any that is admitted. A delegate's message is
// archived like any other, so delayed delegated writes are replayed after
// newer fences (the stale gates hold for them as for the owner's).
func (wk *worker) delegate(ctx context.Context) {
	w := wk.w
	if !wk.iss.StatusExpiresAt.After(w.clock.Now().Add(time.Second)) {
		if wk.refresh(ctx); !wk.has {
			return
		}
	}
	from, to := wk.seg, wk.seg+uint64(w.rng.IntN(3))
	w.point(ctx, "registry")
	d, err := w.reg.Delegate(ctx, wk.name, wk.iss.Lease.ID, registry.DelegateParams{Delegate: wk.delegateName(),
		GrantDigest: wk.iss.GrantDigest, SegmentFrom: from, SegmentTo: to})
	if err != nil {
		wk.afterWrite(ctx, err)
		return
	}
	w.stats.inject("delegation minted")
	w.delegations = append(w.delegations, delegated{token: d.Token, res: wk.res.name, lease: wk.iss.Lease.ID})
	w.point(ctx, "registry")
	status, _, err := w.reg.DelegationStatus(ctx, registry.DelegationStatusRequest{ID: d.Delegation.ID,
		GrantDigest: wk.iss.GrantDigest, Caller: wk.delegateName()})
	if err != nil {
		return // the delegate cannot start: the owner writes on itself
	}
	if w.chance(0.2) {
		wk.forgeDelegated(ctx, d, status, to)
	}
	for wk.has && wk.seg <= to {
		if w.chance(0.08) {
			wk.revokeMidway(ctx, d, status)
			return
		}
		m := wk.msg(wk.seg, wk.body(wk.seg))
		m.caller, m.status, m.delegation = wk.delegateName(), status, d.Token
		w.stats.inject("delegated write")
		err := wk.send(ctx, m, false)
		if err != nil {
			wk.afterWrite(ctx, err)
			return // the owner takes the rest back, numbering as it would
		}
		w.stats.inject("delegated write accepted")
		wk.seg++
	}
}

// revokeMidway: the owner revokes delegation d while segments of it are
// left, and the delegate, not yet told, writes the next one with its status
// proof through a gateway in query mode. That gateway asks the registry and
// must refuse it (RevokeDelegation: query mode at once, proof mode within
// one status proof life), so an admission counts as a forgery accepted.
func (wk *worker) revokeMidway(ctx context.Context, d registry.IssuedDelegation, status string) {
	w := wk.w
	w.point(ctx, "registry")
	if err := w.reg.RevokeDelegation(ctx, wk.name, d.Delegation.ID); err != nil {
		return
	}
	w.stats.inject("delegation revoked before its last segment")
	m := wk.msg(wk.seg, fmt.Sprintf("%s:f%d:s%d:revoked", wk.delegateName(), wk.iss.Lease.FenceToken, wk.seg))
	m.caller, m.status, m.delegation, m.kind, m.viaQuery = wk.delegateName(), status, d.Token, 11, true
	wk.send(ctx, m, true)
}

// forgeDelegated sends one misuse of the delegation d (status proof status,
// last segment to) at the owner's next segment, which the write would take
// if it were admitted: a delegation minted for the segment after d's range
// only, an impostor presenting d, or another lease's delegation of the
// resource. Each must be refused before it touches any state.
func (wk *worker) forgeDelegated(ctx context.Context, d registry.IssuedDelegation, status string, to uint64) {
	w := wk.w
	m := wk.msg(wk.seg, fmt.Sprintf("%s:f%d:s%d:forged", wk.delegateName(), wk.iss.Lease.FenceToken, wk.seg))
	m.caller, m.status, m.delegation, m.kind = wk.delegateName(), status, d.Token, 10
	switch w.rng.IntN(3) {
	case 0:
		w.point(ctx, "registry")
		later, err := w.reg.Delegate(ctx, wk.name, wk.iss.Lease.ID, registry.DelegateParams{Delegate: wk.delegateName(),
			GrantDigest: wk.iss.GrantDigest, SegmentFrom: to + 1, SegmentTo: to + 1})
		if err != nil {
			return
		}
		w.point(ctx, "registry")
		st, _, err := w.reg.DelegationStatus(ctx, registry.DelegationStatusRequest{ID: later.Delegation.ID,
			GrantDigest: wk.iss.GrantDigest, Caller: wk.delegateName()})
		if err != nil {
			return
		}
		w.stats.inject("delegated write outside its segments")
		m.delegation, m.status = later.Token, st
	case 1:
		w.stats.inject("delegation presented by an impostor")
		m.caller = wk.delegateName() + "-impostor"
	case 2:
		other := w.otherDelegation(wk.res.name, wk.iss.Lease.ID)
		if other.token == "" {
			return
		}
		w.stats.inject("another lease's delegation")
		m.delegation = other.token
	}
	wk.send(ctx, m, true)
}

// delegated is a delegation the world's owners minted, kept so that a
// delegate can present another lease's.
type delegated struct{ token, res, lease string }

// otherDelegation finds a delegation of resource res minted under another
// lease than lease.
func (w *world) otherDelegation(res, lease string) delegated {
	for i := len(w.delegations) - 1; i >= 0; i-- {
		if d := w.delegations[i]; d.res == res && d.lease != lease {
			return d
		}
	}
	return delegated{}
}

// afterWrite is what a careful worker does on a write's refusal: wait and
// retry the same segment when the outcome or the store is in doubt, fetch a
// fresh proof or grant when its status is refused, go back to a segment it
// may have lost, and give the lease up on any other refusal.
func (wk *worker) afterWrite(ctx context.Context, err error) {
	w := wk.w
	switch code := fencegate.ErrorCode(err); {
	case code == fencegate.CodeMutationUnknown || code == fencegate.CodeResourceBusy || code == fencegate.CodeBackendUnavailable:
		w.s.sleep(ctx, time.Duration(500+w.rng.IntN(3000))*time.Millisecond)
	case code == fencegate.CodeStatusInvalid || code == fencegate.CodeEpochRevoked || code == fencegate.CodePolicyStale ||
		code == fencegate.CodeDelegationInvalid || code == fencegate.CodeLeaseNotHeld:
		wk.refresh(ctx)
	case code == fencegate.CodeSegmentOutOfOrder:
		wk.seg = 1 + uint64(w.rng.IntN(int(wk.seg)))
	default: // STALE_OWNER, FENCE_REGRESSION, conflicts: give the lease up
		wk.has = false
	}
}
