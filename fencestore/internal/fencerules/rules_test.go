package fencerules

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// row is a resource at fence 5 under lease L5 and root R5, segment 2 the
// last accepted, its grant issued at 1000 ms.
var row = fencegate.ResourceState{Resource: "local/r", HighestFence: 5, Root: "R5", Lease: "L5",
	LastSegmentSeq: 2, GrantIssuedAt: 1000}

func admit(fence, seg uint64, lease, root string, issuedAt int64) *fencegate.AdmitRequest {
	return &fencegate.AdmitRequest{
		Grant: fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: "local/r", FenceToken: fence, Lease: lease,
			OperationRoot: root, IssuedAt: issuedAt}},
		Segment: seg, Target: "objects/local/r", Method: "PUT", PayloadDigest: "sha256:a", ReceiptID: "rc",
	}
}

var liveSeg2 = &fencegate.Receipt{ID: "r2", Target: "objects/local/r", Method: "PUT", PayloadDigest: "sha256:a",
	State: fencegate.ReceiptCommitted}

// TestDecide is the table of DESIGN §3's fence rules, one row per rule.
func TestDecide(t *testing.T) {
	busy := row
	busy.PendingReceipt = "rp"
	otherPayload := *liveSeg2
	otherPayload.PayloadDigest = "sha256:b"
	otherTarget := *liveSeg2
	otherTarget.Target = "objects/local/r/x"
	byDelegate := *liveSeg2 // segment 2 as a delegate wrote it
	byDelegate.Delegate, byDelegate.DelegationID = "consumer-1", "dlg-1"
	fromDelegate := admit(5, 2, "L5", "R5", 1000)
	fromDelegate.Delegate, fromDelegate.DelegationID = "consumer-2", "dlg-2"
	for _, c := range []struct {
		rule string
		row  fencegate.ResourceState
		req  *fencegate.AdmitRequest
		live *fencegate.Receipt
		want Verdict
		code fencegate.Code
	}{
		{"FirstFenceStartsAtSegmentOne", fencegate.ResourceState{}, admit(1, 1, "L1", "R1", 10), nil, Accept, ""},
		{"FirstFencePastSegmentOneIsOutOfOrder", fencegate.ResourceState{}, admit(1, 2, "L1", "R1", 10), nil, Reject, fencegate.CodeSegmentOutOfOrder},
		{"LowerFenceIsStaleOwner", row, admit(4, 1, "L4", "R4", 900), nil, Reject, fencegate.CodeStaleOwner},
		{"LowerFenceIssuedLaterIsRegression", row, admit(4, 1, "L4", "R4", 3001), nil, Reject, fencegate.CodeFenceRegression},
		{"EqualFenceUnderAnotherLeaseIsRegression", row, admit(5, 3, "Lx", "R5", 1000), nil, Reject, fencegate.CodeFenceRegression},
		{"EqualFenceUnderAnotherRootIsRegression", row, admit(5, 3, "L5", "Rx", 1000), nil, Reject, fencegate.CodeFenceRegression},
		{"NextSegmentIsAccepted", row, admit(5, 3, "L5", "R5", 1000), nil, Accept, ""},
		{"SkippedSegmentIsOutOfOrder", row, admit(5, 4, "L5", "R5", 1000), nil, Reject, fencegate.CodeSegmentOutOfOrder},
		{"SameSegmentSamePayloadIsReplay", row, admit(5, 2, "L5", "R5", 1000), liveSeg2, Replay, ""},
		{"SameSegmentOtherPayloadIsQuarantined", row, admit(5, 2, "L5", "R5", 1000), &otherPayload, Quarantine, fencegate.CodeQuarantined},
		{"SameSegmentFromADelegateIsReplayOfTheOwners", row, fromDelegate, liveSeg2, Replay, ""},
		{"SameSegmentFromTheOwnerIsReplayOfTheDelegates", row, admit(5, 2, "L5", "R5", 1000), &byDelegate, Replay, ""},
		{"SameSegmentFromAnotherDelegateIsReplay", row, fromDelegate, &byDelegate, Replay, ""},
		{"SameSegmentOtherTargetIsQuarantined", row, admit(5, 2, "L5", "R5", 1000), &otherTarget, Quarantine, fencegate.CodeQuarantined},
		{"OldSegmentWithoutLiveReceiptIsOutOfOrder", row, admit(5, 1, "L5", "R5", 1000), nil, Reject, fencegate.CodeSegmentOutOfOrder},
		{"HigherFenceStartsAtSegmentOne", row, admit(6, 1, "L6", "R6", 3000), nil, Accept, ""},
		{"HigherFencePastSegmentOneIsOutOfOrder", row, admit(6, 2, "L6", "R6", 3000), nil, Reject, fencegate.CodeSegmentOutOfOrder},
		{"PendingEffectMakesHigherFenceBusy", busy, admit(6, 1, "L6", "R6", 3000), nil, Reject, fencegate.CodeResourceBusy},
		{"PendingEffectMakesNextSegmentBusy", busy, admit(5, 3, "L5", "R5", 1000), nil, Reject, fencegate.CodeResourceBusy},
		{"PendingEffectStillAnswersStale", busy, admit(4, 1, "L4", "R4", 900), nil, Reject, fencegate.CodeStaleOwner},
		{"PendingEffectStillAnswersReplay", busy, admit(5, 2, "L5", "R5", 1000), liveSeg2, Replay, ""},
	} {
		t.Run(c.rule, func(t *testing.T) {
			v, err := Decide(c.row, c.req, c.live)
			if v != c.want || fencegate.ErrorCode(err) != c.code {
				t.Fatalf("Decide = %v, %v; want %v, %q", v, err, c.want, c.code)
			}
			if (err != nil) != (v == Reject || v == Quarantine) {
				t.Fatalf("the error must be set exactly for Reject and Quarantine: %v, %v", v, err)
			}
		})
	}
}

// TestAcceptedMovesFenceRootLeaseSegmentAndPendingTogether: the row after an
// accepted segment, as one write.
// TestFenceOrderIsDecidesFirstRule: what the gateway asks before admission
// (through fencestore.FenceOrder) is exactly Decide's verdict on the fence:
// below the highest is STALE_OWNER, or FENCE_REGRESSION when issued later;
// at or above it passes on to the other rules.
func TestFenceOrderIsDecidesFirstRule(t *testing.T) {
	for _, c := range []struct {
		rule     string
		fence    uint64
		issuedAt int64
		code     fencegate.Code
	}{
		{"LowerFenceIsStaleOwner", 4, 900, fencegate.CodeStaleOwner},
		{"LowerFenceIssuedAtTheSameTimeIsStaleOwner", 4, 1000, fencegate.CodeStaleOwner},
		{"LowerFenceIssuedWithinTheClockSkewIsStaleOwner", 4, 3000, fencegate.CodeStaleOwner},
		{"LowerFenceIssuedLaterIsRegression", 4, 3001, fencegate.CodeFenceRegression},
		{"EqualFencePasses", 5, 1000, ""},
		{"HigherFencePasses", 6, 3000, ""},
	} {
		t.Run(c.rule, func(t *testing.T) {
			req := admit(c.fence, 1, "L", "R", c.issuedAt)
			err := FenceOrder(row, req.Grant)
			if got := fencegate.ErrorCode(err); got != c.code {
				t.Fatalf("FenceOrder: %v, want %q", err, c.code)
			}
			if c.code == "" {
				return
			}
			if _, derr := Decide(row, req, nil); fencegate.ErrorCode(derr) != c.code {
				t.Fatalf("Decide answers %v where FenceOrder answers %v", derr, err)
			}
		})
	}
}

func TestAcceptedMovesFenceRootLeaseSegmentAndPendingTogether(t *testing.T) {
	req := admit(6, 1, "L6", "R6", 3000)
	req.Now = time.Date(2030, 1, 1, 0, 0, 0, 1500, time.UTC)
	got := Accepted(req)
	want := fencegate.ResourceState{Resource: "local/r", HighestFence: 6, Root: "R6", Lease: "L6", LastSegmentSeq: 1,
		GrantIssuedAt: 3000, PendingReceipt: "rc", UpdatedAt: time.Date(2030, 1, 1, 0, 0, 0, 1000, time.UTC)}
	if got != want {
		t.Fatalf("Accepted = %+v, want %+v", got, want)
	}
	if r := NewReceipt(req); r.State != fencegate.ReceiptPending || r.ID != "rc" || r.FenceToken != 6 || r.Segment != 1 {
		t.Fatalf("NewReceipt = %+v", r)
	}
}

// TestSettleRow: a not-applied last segment gives its number back; settling
// clears the pending mark unless the outcome is UNKNOWN.
func TestSettleRow(t *testing.T) {
	pending := row
	pending.PendingReceipt = "r2"
	for _, c := range []struct {
		rule    string
		state   fencegate.ReceiptState
		fence   uint64
		seg     uint64
		wantSeg uint64
		wantPen string
	}{
		{"CommittedClearsPending", fencegate.ReceiptCommitted, 5, 2, 2, ""},
		{"NotAppliedLastSegmentGivesItBack", fencegate.ReceiptNotApplied, 5, 2, 1, ""},
		{"FailedLastSegmentGivesItBack", fencegate.ReceiptFailed, 5, 2, 1, ""},
		{"NotAppliedEarlierSegmentKeepsTheLast", fencegate.ReceiptNotApplied, 5, 1, 2, ""},
		{"NotAppliedOfAnOlderFenceKeepsTheRow", fencegate.ReceiptNotApplied, 4, 2, 2, ""},
		{"UnknownKeepsPending", fencegate.ReceiptUnknown, 5, 2, 2, "r2"},
	} {
		t.Run(c.rule, func(t *testing.T) {
			settled := fencegate.Receipt{ID: "r2", FenceToken: c.fence, Segment: c.seg, State: c.state}
			next, _ := SettleRow(pending, &settled, time.Time{})
			if next.LastSegmentSeq != c.wantSeg || next.PendingReceipt != c.wantPen || next.HighestFence != 5 {
				t.Fatalf("SettleRow = seg %d pending %q fence %d; want seg %d pending %q fence 5",
					next.LastSegmentSeq, next.PendingReceipt, next.HighestFence, c.wantSeg, c.wantPen)
			}
		})
	}
}

// TestCheckTargetBindsATargetToOneResource: nested resources are separate
// fence lines.
func TestCheckTargetBindsATargetToOneResource(t *testing.T) {
	req := admit(1, 1, "L1", "R1", 10)
	if err := CheckTarget("", req); err != nil {
		t.Fatalf("unbound target: %v", err)
	}
	if err := CheckTarget("local/r", req); err != nil {
		t.Fatalf("target bound to the grant's resource: %v", err)
	}
	if err := CheckTarget("local", req); fencegate.ErrorCode(err) != fencegate.CodeResourceMismatch {
		t.Fatalf("target bound to another resource: %v", err)
	}
}

// TestNewReceiptNamesTheDelegate: a delegated admission's receipt keeps its
// delegate and delegation ID beside the grant's owner; the owner's own has
// neither.
func TestNewReceiptNamesTheDelegate(t *testing.T) {
	req := admit(5, 3, "L5", "R5", 1000)
	req.Grant.Owner = "coordinator"
	if r := NewReceipt(req); r.Owner != "coordinator" || r.Delegate != "" || r.DelegationID != "" {
		t.Fatalf("the owner's receipt: owner %q, delegate %q, delegation %q", r.Owner, r.Delegate, r.DelegationID)
	}
	req.Delegate, req.DelegationID = "consumer-1", "dlg-1"
	if r := NewReceipt(req); r.Owner != "coordinator" || r.Delegate != "consumer-1" || r.DelegationID != "dlg-1" {
		t.Fatalf("the delegate's receipt: owner %q, delegate %q, delegation %q", r.Owner, r.Delegate, r.DelegationID)
	}
}

// TestDelegateAndDelegationComeTogether: an admission naming a delegate
// without its delegation (or the reverse), or either with text a store
// cannot keep as it came, is INVALID_REQUEST.
func TestDelegateAndDelegationComeTogether(t *testing.T) {
	for _, c := range []struct{ delegate, delegation string }{
		{"consumer-1", ""}, {"", "dlg-1"}, {"consumer\x00", "dlg-1"}, {"consumer-1", "dlg-\xff"},
	} {
		req := admit(5, 3, "L5", "R5", 1000)
		req.Delegate, req.DelegationID = c.delegate, c.delegation
		if err := ValidateAdmit(req); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			t.Errorf("delegate %q, delegation %q: %v, want INVALID_REQUEST", c.delegate, c.delegation, err)
		}
	}
	req := admit(5, 3, "L5", "R5", 1000)
	req.Delegate, req.DelegationID = "consumer-1", "dlg-1"
	if err := ValidateAdmit(req); err != nil {
		t.Fatalf("a delegated admission: %v", err)
	}
}

// TestQuarantineRecordNamesItsSender: a delegated write's quarantine record
// names its delegate and delegation beside the grant's owner, the owner's
// names neither, and the same refused request has the same ID whoever sends
// it; a repeat counted on the record keeps naming the first sender.
func TestQuarantineRecordNamesItsSender(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	req := admit(5, 2, "L5", "R5", 1000)
	req.Grant.Owner, req.PayloadDigest, req.Now = "coordinator", "sha256:b", at
	own := QuarantineRecord(req, liveSeg2)
	if own.Owner != "coordinator" || own.Delegate != "" || own.DelegationID != "" {
		t.Fatalf("the owner's record: owner %q, delegate %q, delegation %q", own.Owner, own.Delegate, own.DelegationID)
	}
	req.Delegate, req.DelegationID = "consumer-1", "dlg-1"
	q := QuarantineRecord(req, liveSeg2)
	if q.Owner != "coordinator" || q.Delegate != "consumer-1" || q.DelegationID != "dlg-1" {
		t.Fatalf("the delegate's record: owner %q, delegate %q, delegation %q", q.Owner, q.Delegate, q.DelegationID)
	}
	if q.ID != own.ID {
		t.Fatalf("the delegate's record is %s, the owner's %s: who sends it is part of the ID", q.ID, own.ID)
	}
	again := QuarantineAgain(q, at.Add(time.Second))
	if again.Attempts != 2 || again.Delegate != "consumer-1" || again.DelegationID != "dlg-1" || again.ID != q.ID {
		t.Fatalf("a repeat: %+v", again)
	}
}
