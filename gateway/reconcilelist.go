package gateway

import (
	"context"

	"github.com/fencegate/fencegate"
)

// passLimit bounds the receipts of each state one pass looks at (a
// variable for tests).
var passLimit = 10_000

// collect reads up to passLimit receipts in state, oldest first, page by page.
func (rc *Reconciler) collect(ctx context.Context, state fencegate.ReceiptState) ([]fencegate.Receipt, error) {
	out, _, err := rc.readFrom(ctx, state, "")
	return out, err
}

// collectFrom is collect for a pass: it reads on from where the last pass
// stopped and starts over once it reaches the list's end, so that receipts
// behind passLimit older ones (UNKNOWN receipts waiting for a person pile
// up at the head) are reconciled in turn, not never.
// head reports that the read began at the list's start, end that it
// reached its end: a read with both covered the whole list.
func (rc *Reconciler) collectFrom(ctx context.Context, state fencegate.ReceiptState) (out []fencegate.Receipt, head, end bool, err error) {
	rc.mu.Lock()
	from := rc.resume[state]
	rc.mu.Unlock()
	out, next, err := rc.readFrom(ctx, state, from)
	if err != nil && from != "" && fencegate.ErrorCode(err) == fencegate.CodeInvalidRequest {
		from = "" // a cursor the store no longer takes: from the start
		out, next, err = rc.readFrom(ctx, state, from)
	}
	if err != nil {
		return nil, false, false, err
	}
	rc.mu.Lock()
	if rc.resume == nil {
		rc.resume = map[fencegate.ReceiptState]string{}
	}
	rc.resume[state] = next
	rc.mu.Unlock()
	return out, from == "", next == "", nil
}

// readFrom reads up to passLimit receipts in state from cursor, page by
// page; next is where a further read goes on ("" once the list ended).
func (rc *Reconciler) readFrom(ctx context.Context, state fencegate.ReceiptState, cursor string) (out []fencegate.Receipt, next string, err error) {
	page := fencegate.Page{Cursor: cursor}
	for len(out) < passLimit {
		page.Limit = min(fencegate.MaxPageLimit, passLimit-len(out))
		p, err := rc.Store.ReceiptsByState(ctx, state, page)
		if err != nil {
			return nil, "", err
		}
		out = append(out, p.Receipts...)
		if p.Next == "" {
			return out, "", nil
		}
		page.Cursor = p.Next
	}
	return out, page.Cursor, nil
}
