package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

// settleCall is one Settle in a batch.
type settleCall struct {
	id  string
	o   fencegate.Outcome
	out fencegate.Receipt
}

// Settle implements fencegate.FenceStore. It joins the next settle batch (see
// group.go) and returns once that batch committed.
func (s *Store) Settle(ctx context.Context, receiptID string, o fencegate.Outcome) (fencegate.Receipt, error) {
	m, err := s.settles.do(ctx, &settleCall{id: receiptID, o: o})
	if err != nil {
		return fencegate.Receipt{}, translate(err, "settle")
	}
	return m.req.out, nil
}

// runSettles runs one settle batch through runBatch.
func (s *Store) runSettles(ctx context.Context, ms []*member[*settleCall]) {
	runBatch(ctx, ms, s.settleBatch)
}

// settleBatch settles ms in one transaction of two round trips: BEGIN, the
// lock of every resource concerned (in resource order, as Admit takes them)
// and the receipts; then the writes and COMMIT. Members are applied in order,
// each on the state the ones before it left, so two settles of one receipt
// or resource in a batch act as they would one after the other; each changed
// resource row is written once.
func (s *Store) settleBatch(ctx context.Context, ms []*member[*settleCall]) (uncertain bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, translate(err, "settle")
	}
	defer conn.Release()
	ids := make([]string, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.req.id)
	}
	rows := map[string]fencegate.ResourceState{}
	receipts := map[string]fencegate.Receipt{}
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	b.Queue(`SELECT `+resourceCols+` FROM fence_resources
		WHERE resource IN (SELECT resource FROM fence_receipts WHERE receipt_id = ANY($1::text[]))
		ORDER BY resource FOR UPDATE`, ids)
	b.Queue(`SELECT `+receiptCols+` FROM fence_receipts WHERE receipt_id = ANY($1::text[])`, ids)
	br := conn.SendBatch(ctx, b)
	err = func() error {
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		if err := collect(br, func(r pgx.Rows) error {
			row, err := scanResource(r)
			rows[row.Resource] = row
			return err
		}); err != nil {
			return err
		}
		if err := collect(br, func(r pgx.Rows) error {
			rc, err := scanReceipt(r)
			receipts[rc.ID] = rc
			return err
		}); err != nil {
			return err
		}
		return br.Close()
	}()
	if err != nil {
		return false, translate(err, "settle")
	}

	b = &pgx.Batch{}
	dirty := map[string]bool{}
	var order []string
	results := make([]func(), 0, len(ms))
	for _, m := range ms {
		m := m
		r, ok := receipts[m.req.id]
		if !ok {
			err := fencegate.Errorf(fencegate.CodeNotFound, "receipt %q not found", m.req.id)
			results = append(results, func() { m.err = err })
			continue
		}
		o := m.req.o
		next, changed, err := fencerules.Settle(r, &o)
		if err != nil {
			results = append(results, func() { m.err = err })
			continue
		}
		results = append(results, func() { m.req.out = next })
		if !changed {
			continue
		}
		receipts[next.ID] = next
		b.Queue(`UPDATE fence_receipts SET state = $2, version = $3, response = $4, error = $5, settled_at = $6,
			attempts = $7, resend = $8, retry_at = $9 WHERE receipt_id = $1`,
			next.ID, string(next.State), next.Version, responseArg(next.Response), next.Error, next.SettledAt,
			next.Attempts, next.Resend, next.RetryAt)
		if next.State == fencegate.ReceiptCommitted {
			if next.Version == "" {
				b.Queue(`DELETE FROM fence_versions WHERE target = $1`, next.Target)
			} else {
				b.Queue(`INSERT INTO fence_versions (target, version, updated_at) VALUES ($1, $2, $3)
					ON CONFLICT (target) DO UPDATE SET version = EXCLUDED.version, updated_at = EXCLUDED.updated_at`,
					next.Target, next.Version, *next.SettledAt)
			}
		}
		if row, ok := rows[next.Resource]; ok {
			if row, changed := fencerules.SettleRow(row, &next, o.Now); changed {
				rows[next.Resource] = row
				if !dirty[row.Resource] {
					dirty[row.Resource] = true
					order = append(order, row.Resource)
				}
			}
		}
	}
	for _, res := range order {
		row := rows[res]
		b.Queue(`UPDATE fence_resources SET last_segment_seq = $2, pending_receipt = $3, updated_at = $4
			WHERE resource = $1`, row.Resource, row.LastSegmentSeq, row.PendingReceipt, row.UpdatedAt)
	}
	if uncertain, err := commit(ctx, conn, b); err != nil {
		return uncertain, translate(err, "settle")
	}
	for _, set := range results {
		set()
	}
	return false, nil
}
