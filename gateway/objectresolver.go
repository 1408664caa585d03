package gateway

import (
	"context"
	"time"

	"github.com/fencegate/fencegate"
)

// ObjectResolver settles object receipts from the object's own metadata: the
// object carrying the receipt's ID proves COMMITTED. Without that, the write
// is NOT_APPLIED only once no request of it can land any more: Grace after
// its expiry (EffectExpiry, which the store enforces up to
// fencegate.LandBySlack). Grace covers the clock
// skew between gateway and store and the time a store takes from accepting a
// request's headers (where S3 checks the expiry) to applying its body; before
// that the receipt stays UNKNOWN.
type ObjectResolver struct {
	Stores map[string]fencegate.ObjectStore
	Now    func() time.Time
	// EffectTimeout is the gateway's (gateway.Config.EffectTimeout, default 60 s).
	EffectTimeout time.Duration
	Grace         time.Duration
}

// LandsUntil implements Lander: r's write may land until its expiry
// (EffectExpiry), the store's slack and Grace have passed.
func (o ObjectResolver) LandsUntil(r fencegate.Receipt) time.Time {
	effectTimeout := o.EffectTimeout
	if effectTimeout <= 0 {
		effectTimeout = defaultEffectTimeout
	}
	return EffectExpiry(r, effectTimeout).Add(fencegate.LandBySlack + o.Grace)
}

// Resolve queries the object named by r.Target.
func (o ObjectResolver) Resolve(ctx context.Context, r fencegate.Receipt) (fencegate.Outcome, error) {
	name, key, ok := fencegate.SplitObjectTarget(r.Target)
	st := o.Stores[name]
	if !ok || st == nil {
		return fencegate.Outcome{State: fencegate.ReceiptUnknown}, fencegate.Errorf(fencegate.CodeNotFound, "no object store for %q", r.Target)
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	// The HEAD shows the object as it was when asked: a write that can still
	// land then may land after the answer, so the time that decides is the
	// asking's, not the answer's.
	asked := now()
	info, err := st.Head(ctx, key)
	switch {
	case err == nil:
		if namesReceipt(info, r.ID) {
			return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: info.ETag}, nil
		}
	case fencegate.ErrorCode(err) == fencegate.CodeNotFound:
		if r.Method == "DELETE" {
			return fencegate.Outcome{State: fencegate.ReceiptCommitted}, nil
		}
	default:
		return fencegate.Outcome{State: fencegate.ReceiptUnknown}, err
	}
	if !asked.Before(o.LandsUntil(r)) {
		return fencegate.Outcome{State: fencegate.ReceiptNotApplied, Error: "the object does not carry this receipt, and its write can no longer land"}, nil
	}
	return fencegate.Outcome{State: fencegate.ReceiptUnknown}, nil
}

// namesReceipt reports whether an object's metadata names receipt id: the
// proof that the receipt's write landed (Resolve and Prove share it).
func namesReceipt(info fencegate.ObjectInfo, id string) bool {
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); ok && m.ReceiptID == id {
		return true
	}
	return false
}
