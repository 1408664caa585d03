// Package fencerules holds the fence rules of fencegate.FenceStore as pure
// functions over already-loaded state, so that every store applies the same
// decisions and differs only in how it loads, locks and writes that state.
//
// A store's Admit is: ValidateAdmit; load the resource row (the zero row if the
// resource never admitted anything) under the store's per-resource exclusion;
// load the live receipt at (resource, fence, segment); Decide; then write what
// the verdict says, all in one transaction.
package fencerules

import (
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
)

// Now normalises a timestamp the way every store keeps it: UTC, microsecond
// precision (Postgres' timestamptz resolution), no monotonic reading.
func Now(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Microsecond)
}

// ValidateAdmit checks the shape of req: INVALID_REQUEST for a segment of 0, a
// fence of 0, or an empty resource, target, method, receipt ID or payload
// digest, and for a delegate without a delegation ID (or the reverse) or
// either not UTF-8 without NUL (text every store keeps as it came).
func ValidateAdmit(req *fencegate.AdmitRequest) error {
	switch {
	case req.Segment < 1:
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "segment must be at least 1")
	case req.Grant.FenceToken < 1:
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "fence token must be at least 1")
	case req.Grant.Resource == "":
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "grant has no resource")
	case req.Target == "":
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "admit request has no target")
	case req.Method == "":
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "admit request has no method")
	case req.ReceiptID == "":
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "admit request has no receipt ID")
	case req.PayloadDigest == "":
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "admit request has no payload digest")
	case req.EffectTimeout < 0:
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "admit request has a negative effect timeout")
	case fencegate.CheckEffectKey(req.EffectKey) != nil:
		return fencegate.CheckEffectKey(req.EffectKey)
	case (req.Delegate == "") != (req.DelegationID == ""):
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "a delegated admission names both its delegate and its delegation")
	case !fencegate.KeptText(req.Delegate) || !fencegate.KeptText(req.DelegationID):
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "a delegate and a delegation ID must be UTF-8 without NUL")
	case req.Request != nil:
		return req.Request.Validate()
	}
	return nil
}

// Verdict is what Decide concluded for an admit request that passed the fence
// checks.
type Verdict int

// Verdicts of Decide.
const (
	// Reject: nothing is written; Decide's error says why.
	Reject Verdict = iota
	// Accept: write NewReceipt(req) and Accepted(row, req).
	Accept
	// Replay: return the live receipt; nothing is written.
	Replay
	// Quarantine: write QuarantineRecord(req, live) and return Decide's
	// QUARANTINED error; nothing else is written.
	Quarantine
)

// FenceOrder is the first fence rule: a grant whose fence is below the
// resource's highest accepted fence is refused, STALE_OWNER (a newer owner
// was accepted), or FENCE_REGRESSION when the grant was issued after the one
// that set the highest fence (the registry handed out a lower fence later:
// its state went back), later by more than fencegate.MaxClockSkew: a
// registry whose clock stepped back, or a replica behind another, must not
// make a paused owner's late write page as a rollback. Nil for a fence at or
// above the highest. Decide
// applies it first; the gateway also uses it (through fencestore.FenceOrder)
// to answer a stale grant precisely before it reaches the store.
func FenceOrder(row fencegate.ResourceState, g fencegate.VerifiedGrant) error {
	fence := g.FenceToken
	if fence < row.HighestFence {
		if g.IssuedAt > row.GrantIssuedAt+fencegate.MaxClockSkew.Milliseconds() {
			return fencegate.Errorf(fencegate.CodeFenceRegression,
				"fence %d is below highest fence %d but its grant was issued later", fence, row.HighestFence)
		}
		return fencegate.Errorf(fencegate.CodeStaleOwner,
			"fence %d is below highest fence %d: a newer owner holds it", fence, row.HighestFence)
	}
	return nil
}

// Decide applies the fence rules to req against row (the resource's state, the
// zero value for a resource that never admitted a segment) and live (the live
// receipt at (resource, req fence, req segment), nil if none). The error is
// non-nil exactly for Reject and Quarantine.
func Decide(row fencegate.ResourceState, req *fencegate.AdmitRequest, live *fencegate.Receipt) (Verdict, error) {
	fence := req.Grant.FenceToken
	if err := FenceOrder(row, req.Grant); err != nil {
		return Reject, err
	}
	if fence == row.HighestFence {
		if req.Grant.Lease != row.Lease || req.Grant.OperationRoot != row.Root {
			return Reject, fencegate.Errorf(fencegate.CodeFenceRegression,
				"fence %d is already held under another lease or operation root", fence)
		}
		if live != nil {
			// Who sends it is not part of the segment: the owner's replay
			// of a delegate's write (or the reverse) answers the original
			// receipt, which keeps naming who made the write.
			if live.PayloadDigest == req.PayloadDigest && live.Target == req.Target && live.Method == req.Method && live.EffectKey == req.EffectKey {
				return Replay, nil
			}
			return Quarantine, &fencegate.Error{
				Code:      fencegate.CodeQuarantined,
				Message:   "segment was already accepted with another payload, target, method or effect key",
				ReceiptID: live.ID,
			}
		}
	}
	if row.PendingReceipt != "" {
		return Reject, &fencegate.Error{
			Code:      fencegate.CodeResourceBusy,
			Message:   "another effect on the resource has not settled yet",
			ReceiptID: row.PendingReceipt,
		}
	}
	if fence > row.HighestFence {
		if req.Segment != 1 {
			return Reject, fencegate.Errorf(fencegate.CodeSegmentOutOfOrder,
				"a new fence starts at segment 1, not %d", req.Segment)
		}
		return Accept, nil
	}
	if req.Segment != row.LastSegmentSeq+1 {
		return Reject, fencegate.Errorf(fencegate.CodeSegmentOutOfOrder,
			"segment %d does not follow segment %d", req.Segment, row.LastSegmentSeq)
	}
	return Accept, nil
}

// CheckTarget enforces that a target is fenced under one resource only: bound
// is the resource the target was first admitted under ("" if never). Nested
// resources (local/inv and local/inv/7) are separate fence lines, so a key
// both cover is bound to whichever admitted it first; a grant of the other is
// RESOURCE_MISMATCH. Stores check it first and bind the target on Accept.
func CheckTarget(bound string, req *fencegate.AdmitRequest) error {
	if bound != "" && bound != req.Grant.Resource {
		return fencegate.Errorf(fencegate.CodeResourceMismatch,
			"target %q is fenced under resource %q, not %q", req.Target, bound, req.Grant.Resource)
	}
	return nil
}

// NewReceipt is the PENDING receipt an accepted req creates. A delegated
// write's receipt names its delegate and delegation (req.Delegate,
// req.DelegationID); Decide does not look at them, so a replay of the
// segment answers this receipt whoever sends it.
func NewReceipt(req *fencegate.AdmitRequest) fencegate.Receipt {
	g := &req.Grant
	return fencegate.Receipt{
		ID:            req.ReceiptID,
		Resource:      g.Resource,
		Target:        req.Target,
		Method:        req.Method,
		FenceToken:    g.FenceToken,
		Segment:       req.Segment,
		OperationID:   g.OperationID,
		OperationRoot: g.OperationRoot,
		Lease:         g.Lease,
		Owner:         g.Owner,
		Delegate:      req.Delegate,
		DelegationID:  req.DelegationID,
		GrantDigest:   g.Digest,
		PayloadDigest: req.PayloadDigest,
		EffectKey:     req.EffectKey,
		Request:       cloneRequest(req.Request),
		State:         fencegate.ReceiptPending,
		CreatedAt:     Now(req.Now),
		LandBy:        landBy(req),
	}
}

// landBy is the receipt's LandBy for req: Now + EffectTimeout, or zero
// when either is not given.
func landBy(req *fencegate.AdmitRequest) time.Time {
	if req.EffectTimeout <= 0 || req.Now.IsZero() {
		return time.Time{}
	}
	return Now(req.Now).Add(req.EffectTimeout)
}

// Accepted is the resource's state after req was accepted.
func Accepted(req *fencegate.AdmitRequest) fencegate.ResourceState {
	g := &req.Grant
	return fencegate.ResourceState{
		Resource:       g.Resource,
		HighestFence:   g.FenceToken,
		Root:           g.OperationRoot,
		Lease:          g.Lease,
		LastSegmentSeq: req.Segment,
		GrantIssuedAt:  g.IssuedAt,
		PendingReceipt: req.ReceiptID,
		UpdatedAt:      Now(req.Now),
	}
}

// QuarantineRecord is the record a quarantined req writes the first time;
// live is the receipt that was accepted for the segment. It names who sent
// req: the grant's owner and, for a delegated write, its delegate and
// delegation (req.Delegate, req.DelegationID), which are not part of the
// record's ID. It asks req for the payload to keep and keeps it only if it
// came without error and within fencegate.MaxQuarantinePayload.
func QuarantineRecord(req *fencegate.AdmitRequest, live *fencegate.Receipt) fencegate.Quarantine {
	g := &req.Grant
	q := fencegate.Quarantine{
		ID:       fencegate.QuarantineID(g.Resource, g.FenceToken, req.Segment, req.Target, req.Method, req.EffectKey, req.PayloadDigest),
		Resource: g.Resource, FenceToken: g.FenceToken, Segment: req.Segment,
		Target: req.Target, Method: req.Method, EffectKey: req.EffectKey,
		ReceiptID: live.ID, PayloadDigest: req.PayloadDigest, PayloadSize: req.PayloadSize,
		Owner: g.Owner, Delegate: req.Delegate, DelegationID: req.DelegationID,
		At: Now(req.Now), LastAt: Now(req.Now), Attempts: 1,
	}
	if req.QuarantinePayload != nil {
		if p, err := req.QuarantinePayload(); err == nil && p != nil && len(p) <= fencegate.MaxQuarantinePayload {
			q.Payload, q.PayloadKept = p, true
		}
	}
	return q
}

// QuarantineAgain is q after the same refused request came again at now:
// one more attempt and a later LastAt, nothing else. Who sent it is not
// looked at: the record keeps naming the first attempt's sender (its
// Delegate and DelegationID), whoever repeats it.
func QuarantineAgain(q fencegate.Quarantine, now time.Time) fencegate.Quarantine {
	q.Attempts++
	if t := Now(now); t.After(q.LastAt) {
		q.LastAt = t
	}
	return q
}

// QuarantineExpired reports whether fencegate.Compactor's CompactQuarantine
// may delete q: its last attempt (LastAt) is before `before`. A record the
// refused request keeps hitting is kept while it does; its first attempt
// does not matter.
func QuarantineExpired(q *fencegate.Quarantine, before time.Time) bool {
	return q.LastAt.Before(before)
}

// Settle moves r to o. changed is false when the call is an idempotent repeat
// (same terminal state, same version): r is returned as it is and nothing must
// be written. A receipt in a final state is never moved: any other outcome is
// RECEIPT_SETTLED. Stores call it on the receipt as read inside the write's
// own transaction (or lock), so that the check and the write are atomic.
func Settle(r fencegate.Receipt, o *fencegate.Outcome) (next fencegate.Receipt, changed bool, err error) {
	if r.State == o.State && o.State.Terminal() && r.Version == o.Version {
		return r, false, nil
	}
	if r.State.Terminal() {
		// A final state never changes, whoever offers another one (a queued
		// retry, another replica's resend, an operator): the caller re-reads.
		return r, false, &fencegate.Error{Code: fencegate.CodeReceiptSettled, ReceiptID: r.ID,
			Message: fmt.Sprintf("receipt %s is already %s; it cannot become %s", r.ID, r.State, o.State)}
	}
	if o.IfPending && (r.State != fencegate.ReceiptPending || r.SettledAt != nil) {
		return r, false, &fencegate.Error{Code: fencegate.CodeStillReconciling, ReceiptID: r.ID,
			Message: fmt.Sprintf("receipt %s is no longer as admitted (%s): it is being reconciled", r.ID, r.State)}
	}
	if !o.IfSettledAt.IsZero() && (r.SettledAt == nil || !r.SettledAt.Equal(o.IfSettledAt)) {
		return r, false, &fencegate.Error{Code: fencegate.CodeStillReconciling, ReceiptID: r.ID,
			Message: fmt.Sprintf("receipt %s changed since it was read (a resend may be in flight)", r.ID)}
	}
	if !fencegate.CanSettle(r.State, o.State) {
		return r, false, fencegate.Errorf(fencegate.CodeInvalidRequest,
			"receipt %s cannot move from %s to %s", r.ID, r.State, o.State)
	}
	at := Now(o.Now)
	r.State = o.State
	r.Version = o.Version
	r.Response = o.Response
	r.Error = o.Error
	r.Attempts += max(o.Attempts, 0)
	r.Resend = o.Resend && o.State == fencegate.ReceiptUnknown
	r.RetryAt = nil
	if o.State == fencegate.ReceiptUnknown && o.RetryAfter > 0 {
		t := at.Add(min(o.RetryAfter, fencegate.MaxRetryAfter))
		r.RetryAt = &t
	}
	r.SettledAt = &at
	return r, true, nil
}

// cloneRequest copies r so that a store never shares the caller's slices.
func cloneRequest(r *fencegate.EffectRequest) *fencegate.EffectRequest {
	if r == nil {
		return nil
	}
	cp := *r
	cp.Body = append([]byte(nil), r.Body...)
	if r.Header != nil {
		cp.Header = make(map[string][]string, len(r.Header))
		for k, v := range r.Header {
			cp.Header[k] = append([]string(nil), v...)
		}
	}
	return &cp
}

// SettleRow is the resource's state after its receipt was settled to
// settled.State at now. changed is false when the row stays as it is.
func SettleRow(row fencegate.ResourceState, settled *fencegate.Receipt, now time.Time) (next fencegate.ResourceState, changed bool) {
	if settled.State.NotApplied() && row.HighestFence == settled.FenceToken && row.LastSegmentSeq == settled.Segment {
		row.LastSegmentSeq--
		changed = true
	}
	if row.PendingReceipt == settled.ID && settled.State != fencegate.ReceiptUnknown {
		row.PendingReceipt = ""
		changed = true
	}
	if changed {
		row.UpdatedAt = Now(now)
	}
	return row, changed
}

// CheckUnbind is the rule of TargetBindings.Unbind: bound is the resource
// the target is bound to ("" if none), row the state of resource.
func CheckUnbind(bound, target, resource string, row fencegate.ResourceState) error {
	switch {
	case bound == "":
		return fencegate.Errorf(fencegate.CodeNotFound, "target %q is bound to no resource", target)
	case bound != resource:
		return fencegate.Errorf(fencegate.CodeResourceMismatch, "target %q is bound to %q, not %q", target, bound, resource)
	case row.PendingReceipt != "":
		return &fencegate.Error{Code: fencegate.CodeResourceBusy, ReceiptID: row.PendingReceipt,
			Message: fmt.Sprintf("resource %q has an effect in flight; its binding stays until it settles", resource)}
	}
	return nil
}

// Compactable reports whether fencegate.Compactor may delete r: settled
// (COMMITTED, FAILED or NOT_APPLIED) before `before`, not the receipt of its
// resource's last accepted segment (row, the resource's state), and named by
// no quarantine record (quarantined). quarantined only ever turns the answer
// to false, so a store may ask with false first and look for a record
// naming r only when the answer is true (the embedded store does).
//
// While the row has a receipt pending (PENDING or UNKNOWN: row.PendingReceipt),
// the segment before the last one at the highest fence is kept too: that
// receipt may yet settle FAILED or NOT_APPLIED, and SettleRow then gives its
// segment back, so the one before it is the last accepted segment again and
// its replay must answer the original receipt. A segment under a lower fence
// is never given back to (a new fence starts at segment 1), so it is not kept.
func Compactable(r *fencegate.Receipt, row fencegate.ResourceState, quarantined bool, before time.Time) bool {
	switch r.State {
	case fencegate.ReceiptCommitted, fencegate.ReceiptFailed, fencegate.ReceiptNotApplied:
	default:
		return false
	}
	if r.SettledAt == nil || !r.SettledAt.Before(before) || !r.CreatedAt.Before(before) || quarantined {
		return false
	}
	if row.HighestFence != r.FenceToken {
		return true
	}
	if row.LastSegmentSeq == r.Segment {
		return false // the last accepted segment
	}
	return row.PendingReceipt == "" || row.LastSegmentSeq != r.Segment+1 // the one a give-back makes last
}
