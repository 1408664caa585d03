package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

// The fast path: a batch whose every member the rules of fencerules accept
// on the state this process last committed (known) is sent as ONE pipeline,
// BEGIN ... COMMIT, one round trip: one statement per member (cas.go), then
// one for the target bindings and versions. Instead of reading under the row
// lock first, each statement compares every row it changes with its exact
// previous value as known, in the statement that takes the row's lock, and
// fence_expect rolls the transaction back if any differs, so what commits is
// exactly what the locked path would have written. Locks are taken in
// the locked path's order, so concurrent batches cannot deadlock: the
// members whose row exists (as known) in resource order, then those that
// insert a new row in resource order, then the bindings in target order; a
// member's receipts and versions are only ever written under its resource's
// row lock, so where they come does not matter. What a member decided on
// known state cannot check by compare-and-set is backed by the schema: an
// accepted segment assumes no live receipt at it, which the partial unique
// index fence_receipts_live enforces. A rolled-back fast batch is run again
// on the locked path (runBatch), which decides from what it reads; so the
// fast path only ever changes latency.

// errFastMiss wraps the refusal that rolled back a fast batch.
type errFastMiss struct{ err error }

func (e *errFastMiss) Error() string { return "fast path missed: " + e.err.Error() }
func (e *errFastMiss) Unwrap() error { return e.err }

// countFast counts a fast batch's result and translates a failure that is
// not a miss.
func (s *Store) countFast(err error, op string) error {
	switch {
	case err == nil:
		s.fast.Add(1)
	case isFastMiss(err):
		s.missed.Add(1)
	default:
		err = translate(err, op)
	}
	return err
}

func isFastMiss(err error) bool {
	var m *errFastMiss
	return errors.As(err, &m)
}

// fastAdmit is one member decided on known state.
type fastAdmit struct {
	m         *member[*admitCall]
	was       *fencegate.ResourceState // nil: no row known; segment 1 inserts it
	next      fencegate.ResourceState
	r         fencegate.Receipt
	prior     *fencegate.Receipt // the prior's receipt as known, if any
	priorNext fencegate.Receipt
}

// planAdmits decides every member of ms on known state, or reports false if
// one cannot be: no known row (unless segment 1 of a resource seen for the
// first time), a prior whose receipt is not known or is of another resource
// or whose settle is not a change, or any verdict but Accept (refusals and
// replays are decided on what the locked path reads).
func (s *Store) planAdmits(ms []*member[*admitCall]) ([]fastAdmit, bool) {
	plans := make([]fastAdmit, 0, len(ms))
	for _, m := range ms {
		req := &m.req.req
		res := req.Grant.Resource
		p := fastAdmit{m: m}
		row, ok := s.known.row(res)
		if ok {
			p.was = &row
		} else if req.Segment != 1 || req.Prior != nil {
			return nil, false
		}
		cur := row
		if pr := req.Prior; pr != nil {
			r, ok := s.known.receipt(pr.ReceiptID)
			if !ok || r.Resource != res {
				return nil, false
			}
			o := pr.Outcome
			eff, err := fencerules.SettleEffects(r, &cur, &o)
			if err != nil || !eff.Changed {
				return nil, false
			}
			cur = eff.Row
			p.prior, p.priorNext = &r, eff.Receipt
		}
		if v, _ := fencerules.Decide(cur, req, nil); v != fencerules.Accept {
			return nil, false
		}
		p.next = fencerules.Accepted(req)
		p.r = fencerules.NewReceipt(req)
		plans = append(plans, p)
	}
	return plans, true
}

// admitFast commits plans in one round trip. A refusal (a row that is not
// as known, a live receipt at the segment, a target bound elsewhere, a
// receipt ID in use) comes back as errFastMiss: nothing was written.
func (s *Store) admitFast(ctx context.Context, conn *pgxpool.Conn, plans []fastAdmit) (uncertain bool, err error) {
	// Known rows first, then new ones, each in resource order: as the
	// locked path locks every existing row before it inserts a new one.
	slices.SortFunc(plans, func(a, b fastAdmit) int {
		if (a.was == nil) != (b.was == nil) {
			if a.was == nil {
				return 1
			}
			return -1
		}
		return strings.Compare(a.m.req.req.Grant.Resource, b.m.req.req.Grant.Resource)
	})
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	for i := range plans {
		p := &plans[i]
		c := &casStmt{}
		c.row(p.was, &p.next)
		if p.prior != nil {
			c.settled(p.prior, &p.priorNext)
		}
		c.insert(&p.r)
		c.queue(b, p.r.Resource)
	}
	idx := make([]int, len(plans))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int { return strings.Compare(plans[i].r.Target, plans[j].r.Target) })
	targets := make([]string, 0, len(plans))
	bound := make([]string, 0, len(plans))
	for _, i := range idx {
		targets = append(targets, plans[i].r.Target)
		bound = append(bound, plans[i].r.Resource)
	}
	q, args := bindAndRead(targets, bound)
	b.Queue(q, args...)
	var versions map[string]string
	if uncertain, err := sendFast(ctx, conn, b, func(rows pgx.Rows) error {
		var ok bool
		return rows.Scan(&ok, &versions)
	}); err != nil {
		return uncertain, err
	}
	rows := make([]fencegate.ResourceState, 0, len(plans))
	receipts := make([]fencegate.Receipt, 0, len(plans)*2)
	for i := range plans {
		p := &plans[i]
		adm := fencegate.Admission{Receipt: p.r, PreviousVersion: versions[p.r.Target]}
		if p.prior != nil {
			pn := p.priorNext
			adm.Prior = &pn
			receipts = append(receipts, pn)
		}
		p.m.req.adm, p.m.req.decided = adm, true
		rows = append(rows, p.next)
		receipts = append(receipts, p.r)
	}
	s.known.learn(rows, receipts)
	return false, nil
}

// sendFast sends b (BEGIN, statements, then a final read whose rows go to
// each) with COMMIT. A refused statement is errFastMiss (certainly rolled
// back); any other error leaves the outcome open (uncertain).
func sendFast(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch, each func(pgx.Rows) error) (uncertain bool, err error) {
	n := b.Len()
	b.Queue(`COMMIT`)
	br := conn.SendBatch(ctx, b)
	err = func() error {
		defer br.Close()
		last := n
		if each != nil {
			last = n - 1
		}
		for range last {
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
		if each != nil {
			if err := collect(br, each); err != nil {
				return err
			}
		}
		if _, err := br.Exec(); err != nil { // COMMIT
			return err
		}
		return br.Close()
	}()
	if err == nil {
		return false, nil
	}
	if refusedStatement(err) {
		return false, &errFastMiss{err}
	}
	return true, err
}

// fastSettle is one settle decided on known state.
type fastSettle struct {
	m            *member[*settleCall]
	was, next    fencegate.Receipt
	row, nextRow fencegate.ResourceState
}

// planSettles decides every member of ms on known state, or reports false
// if one cannot be: the receipt or its row not known, two members on one
// resource, a settle that is refused or no change, or one that leaves the
// row as it is (UNKNOWN keeps the pending mark; the locked path takes it).
func (s *Store) planSettles(ms []*member[*settleCall]) ([]fastSettle, bool) {
	plans := make([]fastSettle, 0, len(ms))
	seen := map[string]bool{}
	for _, m := range ms {
		r, ok := s.known.receipt(m.req.id)
		if !ok || seen[r.Resource] {
			return nil, false
		}
		seen[r.Resource] = true
		row, ok := s.known.row(r.Resource)
		if !ok || row.PendingReceipt != r.ID {
			return nil, false
		}
		o := m.req.o
		eff, err := fencerules.SettleEffects(r, &row, &o)
		if err != nil || !eff.Changed || !eff.RowChanged {
			return nil, false
		}
		plans = append(plans, fastSettle{m: m, was: r, next: eff.Receipt, row: row, nextRow: eff.Row})
	}
	return plans, true
}

// settleFast commits plans in one round trip: the rows in resource order,
// then the receipts and versions.
func (s *Store) settleFast(ctx context.Context, conn *pgxpool.Conn, plans []fastSettle) (uncertain bool, err error) {
	slices.SortFunc(plans, func(a, b fastSettle) int { return strings.Compare(a.row.Resource, b.row.Resource) })
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	for i := range plans {
		c := &casStmt{}
		c.row(&plans[i].row, &plans[i].nextRow)
		c.settled(&plans[i].was, &plans[i].next)
		c.queue(b, plans[i].row.Resource)
	}
	if uncertain, err := sendFast(ctx, conn, b, nil); err != nil {
		return uncertain, err
	}
	rows := make([]fencegate.ResourceState, 0, len(plans))
	receipts := make([]fencegate.Receipt, 0, len(plans))
	for i := range plans {
		plans[i].m.req.out = plans[i].next
		rows = append(rows, plans[i].nextRow)
		receipts = append(receipts, plans[i].next)
	}
	s.known.learn(rows, receipts)
	return false, nil
}

// release returns conn to the pool. A transaction a refused statement left
// open is rolled back first, so the connection is kept; one in any other
// state the pool destroys.
func release(conn *pgxpool.Conn) {
	pc := conn.Conn().PgConn()
	if st := pc.TxStatus(); (st == 'E' || st == 'T') && !pc.IsClosed() && !pc.IsBusy() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = conn.Exec(ctx, `ROLLBACK`)
		cancel()
	}
	conn.Release()
}
