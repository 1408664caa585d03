package postgres

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
	"github.com/fencegate/fencegate/internal/pgfault"
)

var _ fencegate.PriorSettling = (*Store)(nil)

// SettlesPrior implements fencegate.PriorSettling: Admit applies
// AdmitRequest.Prior in the admission's own transaction.
func (s *Store) SettlesPrior() bool { return true }

// admitCall is one Admit in a batch.
type admitCall struct {
	req fencegate.AdmitRequest
	adm fencegate.Admission
	// decided: the batch committed and adm (with the member's refusal, if
	// any) is its verdict.
	decided bool
}

// Admit implements fencegate.FenceStore. It joins the next admission batch
// (see group.go) and returns once that batch committed. A member with a
// prior also holds the prior receipt's resource and target in its batch, so
// no other member of that batch touches them.
func (s *Store) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	if err := fencerules.ValidateAdmit(&req); err != nil {
		return fencegate.Admission{}, err
	}
	keys := []string{"r\x00" + req.Grant.Resource, "t\x00" + req.Target}
	if p := req.Prior; p != nil {
		more, err := s.priorKeys(ctx, p.ReceiptID)
		if err != nil {
			return fencegate.Admission{}, translate(err, "admit")
		}
		keys = append(keys, more...)
	}
	m, err := s.admits.do(ctx, &admitCall{req: req}, keys...)
	if err != nil {
		if m.req.decided && req.Prior != nil {
			return m.req.adm, translate(err, "admit") // a ruling: the prior settle committed
		}
		return fencegate.Admission{}, translate(err, "admit")
	}
	return m.req.adm, nil
}

// priorKeys are the batch keys of a prior receipt: its ID, resource and
// target (both immutable, so read without a lock when not known).
func (s *Store) priorKeys(ctx context.Context, id string) ([]string, error) {
	keys := []string{"p\x00" + id}
	if r, ok := s.known.receipt(id); ok {
		return append(keys, "r\x00"+r.Resource, "t\x00"+r.Target), nil
	}
	var res, target string
	err := s.pool.QueryRow(ctx, `SELECT resource, target FROM fence_receipts WHERE receipt_id = $1`, id).Scan(&res, &target)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return keys, nil // the batch answers NOT_FOUND
	case err != nil:
		return nil, err
	}
	return append(keys, "r\x00"+res, "t\x00"+target), nil
}

// runAdmits runs one admission batch through runBatch.
func (s *Store) runAdmits(ctx context.Context, ms []*member[*admitCall]) {
	runBatch(ctx, ms, s.admitBatch, s.forgetAdmits)
}

// forgetAdmits drops what ms may have changed from s.known: every resource
// a member holds as a batch key (its own and its prior's, found by
// priorKeys even when the prior's receipt is not known) and the receipts.
func (s *Store) forgetAdmits(ms []*member[*admitCall]) {
	var res, ids []string
	for _, m := range ms {
		res = append(res, m.req.req.Grant.Resource)
		for _, k := range m.keys {
			if r, ok := strings.CutPrefix(k, "r\x00"); ok {
				res = append(res, r)
			}
		}
		ids = append(ids, m.req.req.ReceiptID)
		if p := m.req.req.Prior; p != nil {
			if r, ok := s.known.receipt(p.ReceiptID); ok {
				res = append(res, r.Resource)
			}
			ids = append(ids, p.ReceiptID)
		}
	}
	s.known.forget(res, ids)
}

// admitBatch admits ms in one transaction: in one round trip when every
// member is accepted on what this process knows (fast.go), else under the
// row locks (admitLocked).
func (s *Store) admitBatch(ctx context.Context, ms []*member[*admitCall], locked bool) (uncertain bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, translate(err, "admit")
	}
	defer release(conn)
	if !locked && !s.lockedOnly {
		if plans, ok := s.planAdmits(ms); ok {
			uncertain, err := s.admitFast(ctx, conn, plans)
			return uncertain, s.countFast(err, "admit")
		}
	}
	return s.admitLocked(ctx, conn, ms)
}

// admitLocked admits ms in one transaction. Round trip 1 sends BEGIN, locks
// the existing resource rows (in resource order, so batches do not deadlock
// each other) and then reads bindings, live receipts and versions. A second
// one, only for resources or targets seen for the first time, inserts their
// rows (ON CONFLICT DO NOTHING, which waits for a concurrent inserter), locks
// and reads them again. The last sends the writes and COMMIT. A member's
// prior is applied first, on what was read, and its segment decided on the
// state the prior left. No row is written that does not change, and rows
// inserted for a member that is not accepted are deleted again. uncertain
// reports an error after COMMIT was sent that is not the server's refusal:
// the transaction may have committed.
func (s *Store) admitLocked(ctx context.Context, conn *pgxpool.Conn, ms []*member[*admitCall]) (uncertain bool, err error) {
	rd := newAdmitRead()
	if err := rd.read(ctx, conn, ms, true); err != nil {
		return false, translate(err, "admit")
	}
	var fresh []*member[*admitCall]
	for _, m := range ms {
		g := &m.req.req.Grant
		_, hasRow := rd.rows[g.Resource]
		_, hasBind := rd.bound[m.req.req.Target]
		if !hasRow || !hasBind {
			fresh = append(fresh, m)
		}
	}
	if len(fresh) > 0 {
		if err := rd.read(ctx, conn, fresh, false); err != nil {
			return false, translate(err, "admit")
		}
	}

	st := &settleState{receipts: rd.priors, rows: rd.rows, versions: rd.versions}
	b := &pgx.Batch{}
	results := make([]func(), 0, len(ms))
	var admitted []fencegate.Receipt
	undone := map[string]bool{}
	for _, m := range ms {
		req := &m.req.req
		var adm fencegate.Admission
		if p := req.Prior; p != nil {
			if next, err := st.apply(b, p.ReceiptID, p.Outcome); err != nil {
				adm.PriorErr = err
			} else {
				adm.Prior = &next
			}
		}
		undo := func() {
			if rd.newBind[req.Target] {
				b.Queue(`DELETE FROM fence_targets WHERE target = $1`, req.Target)
			}
			if rd.newRes[req.Grant.Resource] {
				b.Queue(`DELETE FROM fence_resources WHERE resource = $1`, req.Grant.Resource)
				undone[req.Grant.Resource] = true
			}
		}
		answer := func(err error) {
			results = append(results, func() { m.req.adm, m.req.decided, m.err = adm, true, err })
		}
		if err := fencerules.CheckTarget(rd.bound[req.Target], req); err != nil {
			undo()
			answer(err)
			continue
		}
		live := rd.liveAt(req, st.receipts)
		prev := rd.versions[req.Target]
		verdict, rerr := fencerules.Decide(rd.rows[req.Grant.Resource], req, live)
		switch verdict {
		case fencerules.Reject:
			undo()
			answer(rerr)
			continue
		case fencerules.Replay:
			undo()
			adm.Receipt, adm.Replay, adm.PreviousVersion = *live, true, prev
			answer(nil)
			continue
		case fencerules.Quarantine:
			undo()
			putQuarantine(b, req, live)
			answer(rerr)
			continue
		}
		r := fencerules.NewReceipt(req)
		queueReceipt(b, &r)
		rd.rows[req.Grant.Resource] = fencerules.Accepted(req)
		st.mark(req.Grant.Resource)
		admitted = append(admitted, r)
		adm.Receipt, adm.PreviousVersion = r, prev
		answer(nil)
	}
	st.queueDirty(b)
	if uncertain, err := commit(ctx, conn, b); err != nil {
		return uncertain, translate(err, "admit")
	}
	for _, set := range results {
		set()
	}
	rows := make([]fencegate.ResourceState, 0, len(rd.rows))
	for res, row := range rd.rows {
		if !undone[res] {
			rows = append(rows, row)
		}
	}
	s.known.learn(rows, append(admitted, slices.Collect(maps.Values(st.receipts))...))
	return false, nil
}

// commit sends b's statements and COMMIT in one round trip. uncertain is
// true for an error that leaves it open whether the transaction committed.
func commit(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch) (uncertain bool, err error) {
	b.Queue(`COMMIT`)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return !refusedStatement(err), err
	}
	return false, nil
}

// refusedStatement reports whether err, the answer to a pipeline that ends
// in COMMIT, proves the transaction rolled back: the server refused one of
// its statements (severity ERROR; the rest, COMMIT included, was skipped up
// to the Sync). A server error that ends the session (FATAL or PANIC, e.g.
// 57P01 "terminating connection due to administrator command" when the
// backend is told to stop) or one of the unavailable classes (08, 57, 58) can
// arrive after COMMIT completed: the server reports it when it next checks
// for interrupts, which may be after COMMIT's CommandComplete and before
// ReadyForQuery (PostgreSQL manual, "Message Flow: Extended Query" and
// "Termination"; Appendix A). Such an answer, like a lost connection, leaves
// the outcome open: running the members again would find their own
// admissions and answer them as replays that forward nothing.
func refusedStatement(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	sev := pe.SeverityUnlocalized
	if sev == "" {
		sev = pe.Severity
	}
	return sev == "ERROR" && !pgfault.UnavailableState(pe.Code)
}
