package postgres

import (
	"context"

	"github.com/fencegate/fencegate"
)

// settleCall is one Settle in a batch.
type settleCall struct {
	id  string
	o   fencegate.Outcome
	out fencegate.Receipt
}

// Settle implements fencegate.FenceStore. It joins the next write batch (see
// group.go; admissions and settles share batches) and returns once that
// batch committed. It holds the receipt's ID as a batch key and, when this
// process knows the receipt (its own admissions', kept until settled), the
// receipt's resource and target too, so no admission on that resource shares
// its batch: calls on one resource keep their order across batches, as
// admissions do. A settle of a receipt not known carries no resource key (a
// lookup would cost a round trip): it takes the locked path, which decides a
// batch's members in order on what it read under the lock, so a member on
// the same resource in its batch is decided as if it ran just before or
// after it, and a batch on the resource running beside it is ordered by the
// row lock.
func (s *Store) Settle(ctx context.Context, receiptID string, o fencegate.Outcome) (fencegate.Receipt, error) {
	sc := &settleCall{id: receiptID, o: o}
	if _, err := s.writes.do(ctx, &writeCall{settle: sc}, s.settleKeys(receiptID)...); err != nil {
		return fencegate.Receipt{}, translate(err, "settle")
	}
	return sc.out, nil
}

// settleKeys are a settle's batch keys: the receipt's ID and, if it is
// known, its resource and target (receiptKeys).
func (s *Store) settleKeys(id string) []string {
	keys, _ := s.receiptKeys(id)
	return keys
}

// receiptKeys are the batch keys of receipt id: its ID and, when this
// process knows the receipt (known reports it), its resource and target.
func (s *Store) receiptKeys(id string) (keys []string, known bool) {
	keys = []string{"p\x00" + id}
	if r, ok := s.known.receipt(id); ok {
		return append(keys, "r\x00"+r.Resource, "t\x00"+r.Target), true
	}
	return keys, false
}
