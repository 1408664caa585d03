package postgres

import (
	"context"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
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
	runBatch(ctx, ms, s.settleBatch, s.forgetSettles)
}

// forgetSettles drops what ms may have changed from s.known.
func (s *Store) forgetSettles(ms []*member[*settleCall]) {
	var res, ids []string
	for _, m := range ms {
		if r, ok := s.known.receipt(m.req.id); ok {
			res = append(res, r.Resource)
		}
		ids = append(ids, m.req.id)
	}
	s.known.forget(res, ids)
}

// settleBatch settles ms in one transaction: in one round trip when every
// member can be decided on what this process knows (fast.go), else under
// the row locks.
func (s *Store) settleBatch(ctx context.Context, ms []*member[*settleCall], locked bool) (uncertain bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, translate(err, "settle")
	}
	defer release(conn)
	if !locked && !s.lockedOnly {
		if plans, ok := s.planSettles(ms); ok {
			uncertain, err := s.settleFast(ctx, conn, plans)
			return uncertain, s.countFast(err, "settle")
		}
	}
	return s.settleLocked(ctx, conn, ms)
}

// settleLocked settles ms in one transaction of two round trips: BEGIN, the
// lock of every resource concerned (in resource order, as Admit takes them)
// and the receipts; then the writes and COMMIT. Members are applied in order,
// each on the state the ones before it left, so two settles of one receipt
// or resource in a batch act as they would one after the other; each changed
// resource row is written once.
func (s *Store) settleLocked(ctx context.Context, conn *pgxpool.Conn, ms []*member[*settleCall]) (uncertain bool, err error) {
	ids := make([]string, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.req.id)
	}
	st := &settleState{rows: map[string]fencegate.ResourceState{}, receipts: map[string]fencegate.Receipt{}}
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
			st.rows[row.Resource] = row
			return err
		}); err != nil {
			return err
		}
		if err := collect(br, func(r pgx.Rows) error {
			rc, err := scanReceipt(r)
			st.receipts[rc.ID] = rc
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
	results := make([]func(), 0, len(ms))
	for _, m := range ms {
		next, err := st.apply(b, m.req.id, m.req.o)
		if err != nil {
			results = append(results, func() { m.err = err })
			continue
		}
		results = append(results, func() { m.req.out = next })
	}
	st.queueDirty(b)
	if uncertain, err := commit(ctx, conn, b); err != nil {
		// forgetSettles finds only the cached receipts' resources.
		s.known.forget(slices.Collect(maps.Keys(st.rows)), nil)
		return uncertain, translate(err, "settle")
	}
	for _, set := range results {
		set()
	}
	s.known.learn(slices.Collect(maps.Values(st.rows)), slices.Collect(maps.Values(st.receipts)))
	return false, nil
}
