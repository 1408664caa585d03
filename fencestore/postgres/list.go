package postgres

import (
	"context"
	"errors"

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

const quarantineCols = `quarantine_id, resource, fence_token, segment, target, method, effect_key, receipt_id,
	payload_digest, payload_size, payload, owner, at, last_at, attempts, delegate, delegation_id`

// putQuarantine queues the insert of the record of a quarantined req, or counts another
// attempt on the record of the same refused request (same ID): attempts and
// last_at alone move, so the record keeps naming its first sender (delegate,
// delegation_id).
func putQuarantine(b *pgx.Batch, req *fencegate.AdmitRequest, live *fencegate.Receipt) {
	q := fencerules.QuarantineRecord(req, live)
	var payload any
	if q.PayloadKept {
		payload = q.Payload
		if q.Payload == nil {
			payload = []byte{}
		}
	}
	b.Queue(`INSERT INTO fence_quarantine (`+quarantineCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)
		ON CONFLICT (quarantine_id) DO UPDATE SET attempts = fence_quarantine.attempts + 1,
			last_at = GREATEST(fence_quarantine.last_at, EXCLUDED.last_at)`,
		q.ID, q.Resource, q.FenceToken, q.Segment, q.Target, q.Method, q.EffectKey, q.ReceiptID,
		q.PayloadDigest, q.PayloadSize, payload, q.Owner, q.At, q.LastAt, q.Attempts, q.Delegate, q.DelegationID)
}

func scanQuarantine(row pgx.Row) (fencegate.Quarantine, error) {
	var (
		q       fencegate.Quarantine
		payload []byte
	)
	err := row.Scan(&q.ID, &q.Resource, &q.FenceToken, &q.Segment, &q.Target, &q.Method, &q.EffectKey, &q.ReceiptID,
		&q.PayloadDigest, &q.PayloadSize, &payload, &q.Owner, &q.At, &q.LastAt, &q.Attempts, &q.Delegate, &q.DelegationID)
	if payload != nil {
		q.Payload, q.PayloadKept = payload, true
		if len(payload) == 0 {
			q.Payload = nil
		}
	}
	q.At, q.LastAt = q.At.UTC(), q.LastAt.UTC()
	return q, err
}

// Quarantined implements fencegate.FenceStore: a keyset page in (resource,
// at, quarantine_id) order.
func (s *Store) Quarantined(ctx context.Context, resource string, page fencegate.Page) (fencegate.QuarantinePage, error) {
	pg, after, from, err := fencerules.NewPager(fencerules.QuarantineList(resource), page)
	if err != nil {
		return fencegate.QuarantinePage{}, err
	}
	q := `SELECT ` + quarantineCols + ` FROM fence_quarantine WHERE ($1 = '' OR resource = $1)`
	args := []any{resource, pg.Fetch()}
	if from {
		q += ` AND (resource, at, quarantine_id) > ($3, $4, $5)`
		args = append(args, after.Group, after.At, after.ID)
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY resource, at, quarantine_id LIMIT $2`, args...)
	if err != nil {
		return fencegate.QuarantinePage{}, translate(err, "list quarantine")
	}
	defer rows.Close()
	out := fencegate.QuarantinePage{Records: []fencegate.Quarantine{}}
	for rows.Next() {
		rec, err := scanQuarantine(rows)
		if err != nil {
			return fencegate.QuarantinePage{}, translate(err, "list quarantine")
		}
		if !pg.Take(fencegate.QuarantinePosition(&rec), rec.ApproxSize()) {
			break
		}
		out.Records = append(out.Records, rec)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fencegate.QuarantinePage{}, translate(err, "list quarantine")
	}
	out.Next = pg.Next
	return out, nil
}

// QuarantineRecord implements fencegate.FenceStore.
func (s *Store) QuarantineRecord(ctx context.Context, id string) (fencegate.Quarantine, error) {
	q, err := scanQuarantine(s.pool.QueryRow(ctx, `SELECT `+quarantineCols+` FROM fence_quarantine WHERE quarantine_id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return q, fencegate.Errorf(fencegate.CodeNotFound, "no quarantine record %q", id)
	}
	if err != nil {
		return q, translate(err, "read quarantine")
	}
	return q, nil
}
