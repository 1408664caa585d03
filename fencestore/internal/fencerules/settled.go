package fencerules

import "github.com/fencegate/fencegate"

// Settled is everything one settle changes, decided on the receipt and the
// resource row as read inside the settle's own transaction (or lock). Every
// store writes exactly what it says, so a settle, and a settle folded into an
// admission (fencegate.AdmitRequest.Prior), leave the same state in each.
type Settled struct {
	// Receipt is the receipt as the settle leaves it (as it was, for an
	// idempotent repeat).
	Receipt fencegate.Receipt
	// Changed is false for an idempotent repeat: nothing at all is written.
	Changed bool
	// SetVersion: the target's version becomes Receipt.Version, "" forgetting
	// it (COMMITTED only).
	SetVersion bool
	// DropLive: the segment leaves the live index (FAILED, NOT_APPLIED).
	DropLive bool
	// Row is the resource's state after the settle; write it if RowChanged.
	Row        fencegate.ResourceState
	RowChanged bool
}

// SettleEffects applies Settle to r and SettleRow to row (nil when the
// resource has no state row, which then stays absent). The error is Settle's
// ruling (RECEIPT_SETTLED, STILL_RECONCILING, INVALID_REQUEST): nothing is
// to be written.
func SettleEffects(r fencegate.Receipt, row *fencegate.ResourceState, o *fencegate.Outcome) (Settled, error) {
	next, changed, err := Settle(r, o)
	out := Settled{Receipt: next, Changed: changed}
	if err != nil || !changed {
		return out, err
	}
	out.SetVersion = next.State == fencegate.ReceiptCommitted
	out.DropLive = next.State.NotApplied()
	if row != nil {
		out.Row, out.RowChanged = SettleRow(*row, &next, o.Now)
	}
	return out, nil
}
