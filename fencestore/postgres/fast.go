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
	c         *admitCall
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
func (s *Store) planAdmits(ms []*admitCall) ([]fastAdmit, bool) {
	plans := make([]fastAdmit, 0, len(ms))
	for _, a := range ms {
		req := &a.req
		res := req.Grant.Resource
		p := fastAdmit{c: a}
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

// fastPlan is a batch decided on known state: its admissions and its
// settles.
type fastPlan struct {
	admits  []fastAdmit
	settles []fastSettle
}

// planFast decides every member on known state (planAdmits, planSettles),
// or reports false if one cannot be or if two members touch one resource (an
// admission's prior is on its own resource): each statement compares its row
// with the value known before the batch, so two changes of one row cannot
// both hit; the locked path decides them one after the other. Batch keys
// (group.go) keep such members apart except for a settle whose receipt was
// not known, which planSettles refuses anyway.
func (s *Store) planFast(admits []*admitCall, settles []*settleCall) (fastPlan, bool) {
	var (
		p  fastPlan
		ok bool
	)
	if p.admits, ok = s.planAdmits(admits); !ok {
		return p, false
	}
	if p.settles, ok = s.planSettles(settles); !ok {
		return p, false
	}
	res := make([]string, 0, len(p.admits)+len(p.settles))
	for i := range p.admits {
		res = append(res, p.admits[i].r.Resource)
	}
	for i := range p.settles {
		res = append(res, p.settles[i].row.Resource)
	}
	n := len(res)
	slices.Sort(res)
	return p, len(slices.Compact(res)) == n // no resource twice
}

// commitFast commits p in one round trip: one statement per member, in the
// locked path's lock order (the members whose row exists as known, settles
// included, in resource order; then those inserting a new row, in resource
// order), then, if there are admissions, the target bindings and versions. A
// refusal (a row or receipt that is not as known, a live receipt at the
// segment, a target bound elsewhere, a receipt ID in use) comes back as
// errFastMiss: nothing was written.
func (s *Store) commitFast(ctx context.Context, conn *pgxpool.Conn, p fastPlan) (uncertain bool, err error) {
	type stmt struct {
		res   string
		known bool // the row exists as known (changed, not inserted)
		c     *casStmt
	}
	stmts := make([]stmt, 0, len(p.admits)+len(p.settles))
	for i := range p.admits {
		a := &p.admits[i]
		c := newCASStmt()
		c.row(a.was, &a.next)
		if a.prior != nil {
			c.settled(a.prior, &a.priorNext)
		}
		c.insert(&a.r)
		stmts = append(stmts, stmt{a.r.Resource, a.was != nil, c})
	}
	for i := range p.settles {
		x := &p.settles[i]
		c := newCASStmt()
		c.row(&x.row, &x.nextRow)
		c.settled(&x.was, &x.next)
		stmts = append(stmts, stmt{x.row.Resource, true, c})
	}
	slices.SortFunc(stmts, func(a, b stmt) int {
		if a.known != b.known {
			if a.known {
				return -1
			}
			return 1
		}
		return strings.Compare(a.res, b.res)
	})
	b := &pgx.Batch{}
	b.Queue(`BEGIN`)
	for _, st := range stmts {
		st.c.queue(b, st.res)
	}
	var (
		versions map[string]string
		each     func(pgx.Rows) error
	)
	if len(p.admits) > 0 {
		idx := make([]int, len(p.admits))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(i, j int) int { return strings.Compare(p.admits[i].r.Target, p.admits[j].r.Target) })
		targets := make([]string, 0, len(idx))
		bound := make([]string, 0, len(idx))
		for _, i := range idx {
			targets = append(targets, p.admits[i].r.Target)
			bound = append(bound, p.admits[i].r.Resource)
		}
		q, args := bindAndRead(targets, bound)
		b.Queue(q, args...)
		each = func(rows pgx.Rows) error {
			var ok bool
			return rows.Scan(&ok, &versions)
		}
	}
	if uncertain, err := sendFast(ctx, conn, b, each); err != nil {
		return uncertain, err
	}
	rows := make([]fencegate.ResourceState, 0, len(stmts))
	receipts := make([]fencegate.Receipt, 0, len(p.admits)*2+len(p.settles))
	for i := range p.admits {
		a := &p.admits[i]
		adm := fencegate.Admission{Receipt: a.r, PreviousVersion: versions[a.r.Target]}
		if a.prior != nil {
			pn := a.priorNext
			adm.Prior = &pn
			receipts = append(receipts, pn)
		}
		a.c.adm, a.c.decided = adm, true
		rows = append(rows, a.next)
		receipts = append(receipts, a.r)
	}
	for i := range p.settles {
		x := &p.settles[i]
		x.c.out = x.next
		rows = append(rows, x.nextRow)
		receipts = append(receipts, x.next)
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
	c            *settleCall
	was, next    fencegate.Receipt
	row, nextRow fencegate.ResourceState
}

// planSettles decides every member of ms on known state, or reports false
// if one cannot be: the receipt or its row not known, a settle that is
// refused or no change, or one that leaves the row as it is (UNKNOWN keeps
// the pending mark; the locked path takes it). Two members on one resource
// are refused by planFast, its caller.
func (s *Store) planSettles(ms []*settleCall) ([]fastSettle, bool) {
	plans := make([]fastSettle, 0, len(ms))
	for _, sc := range ms {
		r, ok := s.known.receipt(sc.id)
		if !ok {
			return nil, false
		}
		row, ok := s.known.row(r.Resource)
		if !ok || row.PendingReceipt != r.ID {
			return nil, false
		}
		o := sc.o
		eff, err := fencerules.SettleEffects(r, &row, &o)
		if err != nil || !eff.Changed || !eff.RowChanged {
			return nil, false
		}
		plans = append(plans, fastSettle{c: sc, was: r, next: eff.Receipt, row: row, nextRow: eff.Row})
	}
	return plans, true
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

// discard closes conn and takes it out of the pool, for a batch that
// panicked with it: its state is not known (a transaction may be open, its
// row locks held; a pipeline half read), so it is never reused, and the
// server, seeing the session end, rolls back whatever transaction is open
// and frees its locks. The close is bounded (a second); the session ends
// with the socket in any case.
func discard(conn *pgxpool.Conn) {
	c := conn.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = c.Close(ctx)
	cancel()
}
