// Package fencestore is the door to the fence rules for code outside the
// stores. The rules themselves live in fencestore/internal/fencerules (start
// there: rules.go, with its table test rules_test.go), which every store
// (memory, embedded, postgres) applies; this package only forwards, so each
// rule keeps one owner.
package fencestore

import (
	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

// FenceOrder is fencerules.FenceOrder: STALE_OWNER or FENCE_REGRESSION for a
// grant below the resource's highest accepted fence, nil otherwise. The
// gateway uses it to answer a superseded grant precisely before admission;
// the store's transaction applies the same rule again, authoritatively.
func FenceOrder(row fencegate.ResourceState, g fencegate.VerifiedGrant) error {
	return fencerules.FenceOrder(row, g)
}

// SettledReceipt is the receipt r becomes when settled with o, exactly as a
// store's Settle would leave it (fencerules.Settle): RECEIPT_SETTLED,
// STILL_RECONCILING or INVALID_REQUEST when the store would refuse it. The
// gateway uses it to answer a settle it defers (folded into a later
// admission, fencegate.AdmitRequest.Prior, or flushed after the window)
// before that settle is durable.
func SettledReceipt(r fencegate.Receipt, o fencegate.Outcome) (fencegate.Receipt, error) {
	next, _, err := fencerules.Settle(r, &o)
	return next, err
}

// ValidateAdmit is fencerules.ValidateAdmit: INVALID_REQUEST for an admit
// request of the wrong shape, which every store refuses before it reads or
// writes anything. The gateway asks it before it folds a deferred settle
// into the request, so a malformed request never carries one.
func ValidateAdmit(req *fencegate.AdmitRequest) error {
	return fencerules.ValidateAdmit(req)
}

// NewReceipt is the PENDING receipt every store creates when it accepts req
// (fencerules.NewReceipt). The gateway uses it to stage an object write for
// the receipt its admission is about to create (gateway/stage.go); the
// write is used only if the admission answers that receipt.
func NewReceipt(req *fencegate.AdmitRequest) fencegate.Receipt {
	return fencerules.NewReceipt(req)
}
