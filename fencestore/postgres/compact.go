package postgres

import (
	"context"
	"time"

	"github.com/fencegate/fencegate"
)

var _ fencegate.Compactor = (*Store)(nil)

// CompactReceipts implements fencegate.Compactor in one statement. It walks
// the by-state index (state, created_at) of each settled state up to `before` (a receipt settled
// before it was created before it), locks what it deletes with SKIP LOCKED
// so that it never waits for, or holds up, an admission or settle, and
// leaves a resource's last accepted segment (and, while a receipt of the
// resource is pending, the segment before it at the same fence, which a
// give-back makes last again: fencerules.Compactable) and quarantined
// receipts alone.
func (s *Store) CompactReceipts(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n := 0
	for _, state := range terminalStates {
		if n == limit {
			break
		}
		tag, err := s.pool.Exec(ctx, `WITH doomed AS (
			SELECT r.receipt_id FROM fence_receipts r
			WHERE r.state = $3 AND r.created_at < $1 AND r.settled_at < $1
			  AND NOT EXISTS (SELECT 1 FROM fence_resources f WHERE f.resource = r.resource
			                  AND f.highest_fence = r.fence_token
			                  AND (f.last_segment_seq = r.segment
			                       OR (f.pending_receipt <> '' AND f.last_segment_seq = r.segment + 1)))
			  AND NOT EXISTS (SELECT 1 FROM fence_quarantine q WHERE q.receipt_id = r.receipt_id)
			ORDER BY r.created_at, r.receipt_id LIMIT $2
			FOR UPDATE OF r SKIP LOCKED)
			DELETE FROM fence_receipts WHERE receipt_id IN (SELECT receipt_id FROM doomed)`, before.UTC(), limit-n, state)
		if err != nil {
			return n, translate(err, "compact receipts")
		}
		n += int(tag.RowsAffected())
	}
	return n, nil
}

// terminalStates are the states CompactReceipts deletes, in the order it
// takes them.
var terminalStates = []string{string(fencegate.ReceiptFailed), string(fencegate.ReceiptNotApplied), string(fencegate.ReceiptCommitted)}
