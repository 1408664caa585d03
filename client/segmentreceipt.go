package client

import (
	"context"
	"errors"

	"github.com/fencegate/fencegate/domain"
)

// SegmentReceipt returns the receipt that decides segment seg of the lease
// info names (its Lease, FenceToken and OperationID), for settling a segment
// in doubt (InDoubtAfter) before the lease's next write. Of the operation's
// receipts with that lease, fence token and segment (a listed receipt of
// another lease or fence is never chosen), it returns a COMMITTED one over
// one still in flight (PENDING, UNKNOWN) over one not applied (FAILED,
// NOT_APPLIED). When the list has none, it returns the receipt receiptID
// names, as it is (the one the uncertain answer named; "" for none). When
// neither exists, found is false with a nil error: nothing was admitted at
// seg, and the segment is free. An error decides nothing (found is false
// then too, and the segment stays in doubt); a list that itself failed
// NOT_FOUND is answered INTERNAL.
//
// What the answer means: COMMITTED, the segment is taken (numbering moves
// past it; the same write sent at it again is a replay answered with this
// receipt, RecordsWrite); PENDING or UNKNOWN, still unsettled; FAILED,
// NOT_APPLIED or not found, the segment is free. Lease settles its own
// doubts this way.
func (c *Client) SegmentReceipt(ctx context.Context, info LeaseInfo, seg uint64, receiptID string) (r domain.Receipt, found bool, err error) {
	list, err := c.Receipts(ctx, info.OperationID)
	if err != nil {
		if domain.ErrorCode(err) == domain.CodeNotFound {
			// A list that failed NOT_FOUND (a route missing behind a proxy,
			// an older gateway) says nothing about the segment: only the
			// receipts read may answer "free".
			return domain.Receipt{}, false, &domain.Error{Code: domain.CodeInternal,
				Message: "listing the operation's receipts failed: the segment stays in doubt", Err: err}
		}
		return domain.Receipt{}, false, err
	}
	return c.decidingReceipt(ctx, list, info, seg, receiptID)
}

// RecordsWrite reports whether receipt r records the fenced write of method
// on target (as receipts record it: objects/STORE/KEY, apis/API/PATH):
// the same method and target and, for a write with a body (hasBody), the
// same payload digest (payloadDigest, "sha256:HEX" as receipts record it).
// A write with a body whose digest is not known (payloadDigest "": a body
// from a stream that was not read whole) is recorded by no receipt, since
// only its digest could tell it from another body at the target. For a
// write without a body (hasBody false: a delete) payloadDigest is not read,
// and a receipt of the method and target records it whatever digest it
// holds. A COMMITTED receipt that decides a segment in doubt
// (SegmentReceipt) and records the write sent at it was that write's: sent
// at the segment again, it is a replay the gateway answers with this
// receipt, nothing forwarded. One that does not record it belongs to
// another write of the grant. Lease settles its own doubts with this rule,
// and fencectl its lease file's. An API call's target is matched as
// domain.SameCallTarget has it: a route that binds headers (Stripe-Account)
// records their values in the target, which the client does not compute.
func RecordsWrite(r domain.Receipt, method, target, payloadDigest string, hasBody bool) bool {
	if r.Method != method || !domain.SameCallTarget(r.Target, target) {
		return false
	}
	return !hasBody || payloadDigest != "" && r.PayloadDigest == payloadDigest
}

// ReceiptIDOf returns the receipt a fenced write's error names (the
// ReceiptID of the first *domain.Error in err's chain: the receipt a
// MUTATION_UNKNOWN or QUARANTINED answer points at), "" for none. It is the
// receiptID SegmentReceipt takes after an answer that left the segment in
// doubt (InDoubtAfter).
func ReceiptIDOf(err error) string {
	var fe *domain.Error
	if errors.As(err, &fe) {
		return fe.ReceiptID
	}
	return ""
}

// decidingReceipt is SegmentReceipt over list, the operation's receipts
// already read.
func (c *Client) decidingReceipt(ctx context.Context, list []domain.Receipt, info LeaseInfo, seg uint64, receiptID string) (domain.Receipt, bool, error) {
	var best *domain.Receipt
	for i := range list {
		r := &list[i]
		if r.Lease != info.Lease || r.FenceToken != info.FenceToken || r.Segment != seg {
			continue
		}
		if best == nil || rank(r.State) > rank(best.State) {
			best = r
		}
	}
	if best != nil {
		return *best, true, nil
	}
	if receiptID != "" {
		r, err := c.Receipt(ctx, receiptID)
		if err == nil {
			return r, true, nil
		}
		if domain.ErrorCode(err) != domain.CodeNotFound {
			return domain.Receipt{}, false, err
		}
	}
	return domain.Receipt{}, false, nil // no receipt decides seg: nothing was admitted there
}

// rank orders receipt states by what they say about a segment: COMMITTED
// wins over in flight (PENDING, UNKNOWN), which wins over not applied.
func rank(s domain.ReceiptState) int {
	switch s {
	case domain.ReceiptCommitted:
		return 2
	case domain.ReceiptPending, domain.ReceiptUnknown:
		return 1
	}
	return 0
}
