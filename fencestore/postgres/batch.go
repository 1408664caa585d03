package postgres

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

// writeCall is one Admit or one Settle in a batch of the store's one write
// group (group.go): exactly one of admit and settle is set. Admissions and
// settles share batches, so under load a settle costs no COMMIT of its own.
type writeCall struct {
	admit  *admitCall
	settle *settleCall
}

// runWrites runs one batch of the write group through runBatch.
func (s *Store) runWrites(ctx context.Context, ms []*member[*writeCall]) {
	commits, members := runBatch(ctx, ms, s.writeBatch, s.forgetWrites)
	s.writes.batches.Add(uint64(commits))
	s.writes.members.Add(uint64(members))
}

// split returns ms's admissions and settles, each in batch order.
func split(ms []*member[*writeCall]) (admits []*admitCall, settles []*settleCall) {
	for _, m := range ms {
		if m.req.admit != nil {
			admits = append(admits, m.req.admit)
		} else {
			settles = append(settles, m.req.settle)
		}
	}
	return admits, settles
}

// opOf names what a batch's failure failed, for translate.
func opOf(ms []*member[*writeCall]) string {
	admits, settles := split(ms)
	switch {
	case len(settles) == 0:
		return "admit"
	case len(admits) == 0:
		return "settle"
	}
	return "write"
}

// forgetWrites drops what ms may have changed from s.known: every resource
// a member holds as a batch key (an admission's own and its prior's, found
// by priorKeys even when the prior's receipt is not known; a settle's, when
// its receipt was known) and the receipts. A locked batch that fails after
// its reads also forgets every row it read (writeLocked): a settle whose
// receipt was not known holds no resource key.
func (s *Store) forgetWrites(ms []*member[*writeCall]) {
	var res, ids []string
	for _, m := range ms {
		for _, k := range m.keys {
			if r, ok := strings.CutPrefix(k, "r\x00"); ok {
				res = append(res, r)
			}
		}
		if sc := m.req.settle; sc != nil {
			if r, ok := s.known.receipt(sc.id); ok {
				res = append(res, r.Resource)
			}
			ids = append(ids, sc.id)
			continue
		}
		req := &m.req.admit.req
		res = append(res, req.Grant.Resource)
		ids = append(ids, req.ReceiptID)
		if p := req.Prior; p != nil {
			if r, ok := s.known.receipt(p.ReceiptID); ok {
				res = append(res, r.Resource)
			}
			ids = append(ids, p.ReceiptID)
		}
	}
	s.known.forget(res, ids)
}

// writeBatch runs ms, admissions and settles together, in one transaction:
// in one round trip when every member is accepted (or settled) on what this
// process knows (fast.go), else under the row locks (writeLocked). A panic
// while it runs (a bug) is an uncertain failure of the transaction, as a
// lost COMMIT answer is (it may have come after COMMIT): logged once with
// its stack, the members' verdicts cleared and the INTERNAL error returned
// with uncertain set, so runBatch answers every member with it and runs
// none again; the connection, in a state not known (a transaction open, a
// pipeline half read), is closed, never returned to the pool (discard).
func (s *Store) writeBatch(ctx context.Context, ms []*member[*writeCall], locked bool) (uncertain bool, err error) {
	op := opOf(ms)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, translate(err, op)
	}
	defer func() {
		p := recover()
		if p == nil {
			release(conn)
			return
		}
		discard(conn)
		for _, m := range ms { // nothing is decided
			if a := m.req.admit; a != nil {
				a.adm, a.decided = fencegate.Admission{}, false
			} else if sc := m.req.settle; sc != nil {
				sc.out = fencegate.Receipt{}
			}
		}
		uncertain, err = true, batchPanicked(s.writes.log, op, len(ms), p)
	}()
	if !locked && !s.lockedOnly {
		admits, settles := split(ms)
		if plan, ok := s.planFast(admits, settles); ok {
			uncertain, err := s.commitFast(ctx, conn, plan)
			return uncertain, s.countFast(err, op)
		}
	}
	return s.writeLocked(ctx, conn, ms)
}

// writeLocked runs ms in one transaction under the row locks. Round trip 1
// sends BEGIN, locks the existing rows of every resource concerned (the
// admissions', their priors' and the settled receipts', found through the
// receipts, all in resource order, so batches do not deadlock each other)
// and then reads the receipts to settle and, for the admissions, bindings,
// live receipts and versions. A second one, only for resources or targets
// seen for the first time, inserts their rows (ON CONFLICT DO NOTHING, which
// waits for a concurrent inserter), locks and reads them again. The last
// sends the writes and COMMIT. Members are decided in batch order, each on
// the state the ones before it left: a settle as Settle does, an admission's
// prior first and then its segment on the state the prior left; so two
// members on one resource (a settle whose receipt was not known carries no
// resource key) act as they would one after the other. No row is written
// that does not change, each changed row once, and rows inserted for a
// member that is not accepted are deleted again. uncertain reports an error
// after COMMIT was sent that is not the server's refusal: the transaction
// may have committed.
func (s *Store) writeLocked(ctx context.Context, conn *pgxpool.Conn, ms []*member[*writeCall]) (uncertain bool, err error) {
	op := opOf(ms)
	admits, _ := split(ms)
	var settling []string // the receipts the batch may settle
	for _, m := range ms {
		if sc := m.req.settle; sc != nil {
			settling = append(settling, sc.id)
		} else if p := m.req.admit.req.Prior; p != nil {
			settling = append(settling, p.ReceiptID)
		}
	}
	rd, err := readLocked(ctx, conn, admits, settling)
	if err != nil {
		return false, translate(err, op)
	}
	var fresh []*admitCall
	for _, a := range admits {
		_, hasRow := rd.rows[a.req.Grant.Resource]
		_, hasBind := rd.bound[a.req.Target]
		if !hasRow || !hasBind {
			fresh = append(fresh, a)
		}
	}
	if len(fresh) > 0 {
		if err := rd.read(ctx, conn, fresh, nil, false); err != nil {
			return false, translate(err, op)
		}
	}

	st := &settleState{receipts: rd.priors, rows: rd.rows, versions: rd.versions}
	b := &pgx.Batch{}
	results := make([]func(), 0, len(ms))
	var admitted []fencegate.Receipt
	undone := map[string]bool{}
	for _, m := range ms {
		if sc := m.req.settle; sc != nil {
			next, err := st.apply(b, sc.id, sc.o)
			results = append(results, func() {
				if err != nil {
					m.err = err
					return
				}
				sc.out = next
			})
			continue
		}
		a := m.req.admit
		adm, r, err := admitLocked(b, rd, st, &a.req, undone)
		if r != nil {
			admitted = append(admitted, *r)
		}
		results = append(results, func() { a.adm, a.decided, m.err = adm, true, err })
	}
	st.queueDirty(b)
	if uncertain, err := commit(ctx, conn, b); err != nil {
		// forgetWrites finds only the keyed and the known resources.
		s.known.forget(slices.Collect(maps.Keys(rd.rows)), nil)
		return uncertain, translate(err, op)
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

// lockedReadTries bounds readLocked's attempts: a receipt committed while
// the lock statement waited is found by the next attempt's, so a second
// attempt is all a batch needs unless other replicas keep admitting the
// receipts it settles (each attempt then finds them).
const lockedReadTries = 3

// readLocked runs the locked path's first round trip (BEGIN, the row locks,
// the reads) until every receipt to settle that it read has its resource's
// row locked. The lock statement chooses its rows once, before it waits:
// a receipt to settle that another replica committed meanwhile is read by
// the next statement (READ COMMITTED) without its row, and settling it
// there would leave the row naming it pending for ever. Such an attempt is
// rolled back and run again (the receipt's resource is then found and
// locked in order); a receipt's row always exists (the foreign key), so a
// missing one was not locked.
func readLocked(ctx context.Context, conn *pgxpool.Conn, admits []*admitCall, settling []string) (*admitRead, error) {
	for try := 1; ; try++ {
		rd := newAdmitRead()
		if err := rd.read(ctx, conn, admits, settling, true); err != nil {
			return nil, err
		}
		unlocked := false
		for _, r := range rd.priors {
			if _, ok := rd.rows[r.Resource]; !ok {
				unlocked = true
			}
		}
		if !unlocked {
			return rd, nil
		}
		if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
			return nil, err
		}
		if try == lockedReadTries {
			return nil, fencegate.Errorf(fencegate.CodeBackendUnavailable,
				"fence store: receipts to settle kept appearing while their batch waited for row locks (%d tries); try again", try)
		}
	}
}

// admitLocked decides admission req on what rd read and st applied so far
// and queues its writes to b: its verdict adm (with its prior's) and its
// refusal err; r is its new receipt when the segment is accepted. Rows this
// transaction inserted for a member that is not accepted are deleted again
// (their resources noted in undone).
func admitLocked(b *pgx.Batch, rd *admitRead, st *settleState, req *fencegate.AdmitRequest, undone map[string]bool) (adm fencegate.Admission, r *fencegate.Receipt, err error) {
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
	if err := fencerules.CheckTarget(rd.bound[req.Target], req); err != nil {
		undo()
		return adm, nil, err
	}
	live := rd.liveAt(req, st.receipts)
	prev := rd.versions[req.Target]
	verdict, rerr := fencerules.Decide(rd.rows[req.Grant.Resource], req, live)
	switch verdict {
	case fencerules.Reject:
		undo()
		return adm, nil, rerr
	case fencerules.Replay:
		undo()
		adm.Receipt, adm.Replay, adm.PreviousVersion = *live, true, prev
		return adm, nil, nil
	case fencerules.Quarantine:
		undo()
		putQuarantine(b, req, live)
		return adm, nil, rerr
	}
	rc := fencerules.NewReceipt(req)
	queueReceipt(b, &rc)
	rd.rows[req.Grant.Resource] = fencerules.Accepted(req)
	st.mark(req.Grant.Resource)
	adm.Receipt, adm.PreviousVersion = rc, prev
	return adm, &rc, nil
}
