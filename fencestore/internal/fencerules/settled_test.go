package fencerules

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// TestSettleEffectsSaysWhatToWrite: COMMITTED sets the version, FAILED and
// NOT_APPLIED drop the live entry and give the last segment back, anything but
// UNKNOWN clears the pending mark, a repeat writes nothing, a refusal writes
// nothing, and a resource without a row keeps none.
func TestSettleEffectsSaysWhatToWrite(t *testing.T) {
	now := time.UnixMilli(5000).UTC()
	pending := fencegate.Receipt{ID: "rp", Resource: "local/r", FenceToken: 5, Segment: 2, State: fencegate.ReceiptPending}
	busy := row
	busy.PendingReceipt = "rp"
	for _, c := range []struct {
		rule                         string
		r                            fencegate.Receipt
		row                          *fencegate.ResourceState
		o                            fencegate.Outcome
		changed, version, drop, rowW bool
		pendingAfter                 string
		lastAfter                    uint64
		code                         fencegate.Code
	}{
		{"CommittedSetsVersionAndFreesResource", pending, &busy, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v", Now: now}, true, true, false, true, "", 2, ""},
		{"FailedGivesSegmentBack", pending, &busy, fencegate.Outcome{State: fencegate.ReceiptFailed, Now: now}, true, false, true, true, "", 1, ""},
		{"UnknownKeepsPendingMark", pending, &busy, fencegate.Outcome{State: fencegate.ReceiptUnknown, Now: now}, true, false, false, false, "rp", 2, ""},
		{"NoRowStaysAbsent", pending, nil, fencegate.Outcome{State: fencegate.ReceiptCommitted, Now: now}, true, true, false, false, "", 0, ""},
		{"PendingIsNoOutcome", pending, &busy, fencegate.Outcome{State: fencegate.ReceiptPending, Now: now}, false, false, false, false, "", 0, fencegate.CodeInvalidRequest},
	} {
		t.Run(c.rule, func(t *testing.T) {
			st, err := SettleEffects(c.r, c.row, &c.o)
			if fencegate.ErrorCode(err) != c.code && !(c.code == "" && err == nil) {
				t.Fatalf("err %v, want %q", err, c.code)
			}
			if st.Changed != c.changed || st.SetVersion != c.version || st.DropLive != c.drop || st.RowChanged != c.rowW {
				t.Fatalf("%+v", st)
			}
			if st.RowChanged && (st.Row.PendingReceipt != c.pendingAfter || st.Row.LastSegmentSeq != c.lastAfter || !st.Row.UpdatedAt.Equal(now)) {
				t.Fatalf("row %+v", st.Row)
			}
		})
	}
	done := pending
	done.State, done.Version = fencegate.ReceiptCommitted, "v"
	if st, err := SettleEffects(done, &busy, &fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v"}); err != nil || st.Changed || st.RowChanged {
		t.Fatalf("a repeat: %+v, %v; want nothing to write", st, err)
	}
}
