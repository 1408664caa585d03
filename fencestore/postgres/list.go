package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

// ReceiptsByOperation implements fencegate.FenceStore.
func (s *Store) ReceiptsByOperation(ctx context.Context, operationID string, page fencegate.Page) (fencegate.ReceiptPage, error) {
	return s.receipts(ctx, "operation_id", operationID, fencerules.ByOperationList(operationID), page)
}

// ReceiptsByResource implements fencegate.FenceStore.
func (s *Store) ReceiptsByResource(ctx context.Context, resource string, page fencegate.Page) (fencegate.ReceiptPage, error) {
	return s.receipts(ctx, "resource", resource, fencerules.ByResourceList(resource), page)
}

// ReceiptsByState implements fencegate.FenceStore.
func (s *Store) ReceiptsByState(ctx context.Context, state fencegate.ReceiptState, page fencegate.Page) (fencegate.ReceiptPage, error) {
	return s.receipts(ctx, "state", string(state), fencerules.ByStateList(state), page)
}

// receipts reads one page of the receipts whose column equals value, in
// (created_at, receipt_id) order from the cursor on: a keyset query that the
// index on (column, created_at, receipt_id) answers without reading what
// earlier pages held. column is one of this file's constants, never input.
func (s *Store) receipts(ctx context.Context, column, value, list string, page fencegate.Page) (fencegate.ReceiptPage, error) {
	pg, after, from, err := fencerules.NewPager(list, page)
	if err != nil {
		return fencegate.ReceiptPage{}, err
	}
	q := `SELECT ` + receiptCols + ` FROM fence_receipts WHERE ` + column + ` = $1`
	args := []any{value, pg.Fetch()}
	if from {
		q += ` AND (created_at, receipt_id) > ($3, $4)`
		args = append(args, after.At, after.ID)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY created_at, receipt_id LIMIT $2`, args...)
	if err != nil {
		return fencegate.ReceiptPage{}, translate(err, "list receipts")
	}
	defer rows.Close()
	out := fencegate.ReceiptPage{Receipts: []fencegate.Receipt{}}
	for rows.Next() {
		r, err := scanReceipt(rows)
		if err != nil {
			return fencegate.ReceiptPage{}, translate(err, "list receipts")
		}
		if !pg.Take(fencegate.ReceiptPosition(&r), r.ApproxSize()) {
			break
		}
		out.Receipts = append(out.Receipts, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fencegate.ReceiptPage{}, translate(err, "list receipts")
	}
	out.Next = pg.Next
	return out, nil
}

// Quarantined implements fencegate.FenceStore. Records come ordered by
// resource, then time.
func (s *Store) Quarantined(ctx context.Context, resource string) ([]fencegate.Quarantine, error) {
	rows, err := s.pool.Query(ctx, `SELECT resource, fence_token, segment, receipt_id, payload_digest, owner, at
		FROM fence_quarantine WHERE $1 = '' OR resource = $1 ORDER BY resource, at, id`, resource)
	if err != nil {
		return nil, translate(err, "list quarantine")
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fencegate.Quarantine, error) {
		var q fencegate.Quarantine
		err := row.Scan(&q.Resource, &q.FenceToken, &q.Segment, &q.ReceiptID, &q.PayloadDigest, &q.Owner, &q.At)
		q.At = q.At.UTC()
		return q, err
	})
	if err != nil {
		return nil, translate(err, "list quarantine")
	}
	return out, nil
}
