package gateway

import (
	"context"
	"slices"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore"
)

// readStore is the fence store as the gateway's readers see it (Store()):
// the one place where receipt and resource reads are made consistent with
// the deferred settle. Before a receipt of this process's deferred settles
// is read it is flushed (read your writes), and a PENDING object receipt
// whose object already names it is settled COMMITTED as it is read
// (read-repair, proveNow: the answering process may have crashed before its
// settle was durable). Writes and the other reads pass through.
type readStore struct {
	fencegate.FenceStore
	g *Gateway
}

// fix is r as a reader must see it: flushed if deferred here (and, when the
// store takes no settle now, as this process answered it), proven if
// PENDING and its object names it.
func (s readStore) fix(ctx context.Context, r fencegate.Receipt) fencegate.Receipt {
	if r.State != fencegate.ReceiptPending {
		return r
	}
	if e := s.g.deferred.ofReceipt(r.ID); e != nil {
		s.g.flushEntry(e)
		if cur, err := s.FenceStore.Receipt(ctx, r.ID); err == nil {
			r = cur
		}
		if r.State != fencegate.ReceiptPending {
			return r // flushed: no proof, no second read
		}
		if s.g.deferred.pending(e) {
			// The store takes no settle now: this process answered the
			// write, and the entry holds the answer it will record.
			if answered, err := fencestore.SettledReceipt(r, e.out); err == nil {
				return answered
			}
		}
	}
	if p, ok := s.g.proveNow(ctx, r); ok {
		return p
	}
	// Not proven: the object may have moved on because the settle became
	// durable after r was read (this process's fold or flush, which finished
	// its entry before the check above): the store holds it now.
	if cur, err := s.FenceStore.Receipt(ctx, r.ID); err == nil {
		return cur
	}
	return r
}

// Receipt reads receipt id as settled.
func (s readStore) Receipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	r, err := s.FenceStore.Receipt(ctx, id)
	if err != nil {
		return r, err
	}
	return s.fix(ctx, r), nil
}

// ReceiptAt reads a segment's live receipt as settled.
func (s readStore) ReceiptAt(ctx context.Context, resource string, fence, segment uint64) (fencegate.Receipt, error) {
	r, err := s.FenceStore.ReceiptAt(ctx, resource, fence, segment)
	if err != nil {
		return r, err
	}
	return s.fix(ctx, r), nil
}

// ReceiptsByOperation lists an operation's receipts as settled.
func (s readStore) ReceiptsByOperation(ctx context.Context, op string, page fencegate.Page) (fencegate.ReceiptPage, error) {
	p, err := s.FenceStore.ReceiptsByOperation(ctx, op, page)
	return s.fixPage(ctx, p, ""), err
}

// ReceiptsByResource lists a resource's receipts as settled.
func (s readStore) ReceiptsByResource(ctx context.Context, resource string, page fencegate.Page) (fencegate.ReceiptPage, error) {
	p, err := s.FenceStore.ReceiptsByResource(ctx, resource, page)
	return s.fixPage(ctx, p, ""), err
}

// ReceiptsByState lists the receipts in state; a PENDING one found settled
// as it is read is left out of a PENDING list.
func (s readStore) ReceiptsByState(ctx context.Context, state fencegate.ReceiptState, page fencegate.Page) (fencegate.ReceiptPage, error) {
	p, err := s.FenceStore.ReceiptsByState(ctx, state, page)
	return s.fixPage(ctx, p, state), err
}

func (s readStore) fixPage(ctx context.Context, p fencegate.ReceiptPage, state fencegate.ReceiptState) fencegate.ReceiptPage {
	// fix changes only PENDING receipts (and the others are in state, when
	// the list is by state): a page without one is the store's, uncopied.
	if !slices.ContainsFunc(p.Receipts, func(r fencegate.Receipt) bool { return r.State == fencegate.ReceiptPending }) {
		return p
	}
	out := p.Receipts[:0:0]
	for _, r := range p.Receipts {
		r = s.fix(ctx, r)
		if state == "" || r.State == state {
			out = append(out, r)
		}
	}
	p.Receipts = out
	return p
}

// Resource reads a resource's state with its deferred settle durable, and
// its pending mark cleared when the object proves the pending receipt.
func (s readStore) Resource(ctx context.Context, resource string) (fencegate.ResourceState, error) {
	s.g.flushResource(resource)
	rs, err := s.FenceStore.Resource(ctx, resource)
	if err != nil || rs.PendingReceipt == "" {
		return rs, err
	}
	r, rerr := s.FenceStore.Receipt(ctx, rs.PendingReceipt)
	if rerr != nil || r.State != fencegate.ReceiptPending {
		return rs, err
	}
	if s.g.deferred.ofReceipt(r.ID) != nil {
		// Still deferred here (the store took no settle just now): the
		// entry settles it as answered; a proof would queue a second
		// settle, of its own SettledAt, that could land first.
		return rs, err
	}
	if p, ok := s.g.proveNow(ctx, r); ok && p.State != fencegate.ReceiptPending {
		if again, aerr := s.FenceStore.Resource(ctx, resource); aerr == nil {
			return again, nil
		}
	}
	return rs, err
}
