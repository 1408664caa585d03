package postgres

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
	"github.com/fencegate/fencegate/internal/pgfault"
)

// admitCall is one Admit in a batch.
type admitCall struct {
	req fencegate.AdmitRequest
	adm fencegate.Admission
}

// Admit implements fencegate.FenceStore. It joins the next admission batch
// (see group.go) and returns once that batch committed.
func (s *Store) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	if err := fencerules.ValidateAdmit(&req); err != nil {
		return fencegate.Admission{}, err
	}
	m, err := s.admits.do(ctx, &admitCall{req: req}, "r\x00"+req.Grant.Resource, "t\x00"+req.Target)
	if err != nil {
		return fencegate.Admission{}, translate(err, "admit")
	}
	return m.req.adm, nil
}

// runAdmits runs one admission batch through runBatch.
func (s *Store) runAdmits(ctx context.Context, ms []*member[*admitCall]) {
	runBatch(ctx, ms, s.admitBatch)
}

// admitKey names a segment: resource, fence, segment.
type admitKey struct {
	resource   string
	fence, seg uint64
}

// admitRead is what a batch reads under the resources' locks.
type admitRead struct {
	rows     map[string]fencegate.ResourceState
	bound    map[string]string
	live     map[admitKey]fencegate.Receipt
	versions map[string]string
	newRes   map[string]bool // resource rows this transaction inserted
	newBind  map[string]bool // target bindings this transaction inserted
}

// admitBatch admits ms in one transaction. Round trip 1 sends BEGIN, locks
// the existing resource rows (in resource order, so batches do not deadlock
// each other) and then reads bindings, live receipts and versions. A second
// one, only for resources or targets seen for the first time, inserts their
// rows (ON CONFLICT DO NOTHING, which waits for a concurrent inserter), locks
// and reads them again. The last sends the writes and COMMIT. No row is
// written that does not change, and rows inserted for a member that is not
// accepted are deleted again. uncertain reports an error after COMMIT was
// sent that is not the server's refusal: the transaction may have committed.
func (s *Store) admitBatch(ctx context.Context, ms []*member[*admitCall]) (uncertain bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, translate(err, "admit")
	}
	defer conn.Release() // a connection left inside a transaction is destroyed
	rd := &admitRead{rows: map[string]fencegate.ResourceState{}, bound: map[string]string{},
		live: map[admitKey]fencegate.Receipt{}, versions: map[string]string{}, newRes: map[string]bool{}, newBind: map[string]bool{}}
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

	b := &pgx.Batch{}
	results := make([]func(), 0, len(ms))
	for _, m := range ms {
		m := m
		req := &m.req.req
		undo := func() {
			if rd.newBind[req.Target] {
				b.Queue(`DELETE FROM fence_targets WHERE target = $1`, req.Target)
			}
			if rd.newRes[req.Grant.Resource] {
				b.Queue(`DELETE FROM fence_resources WHERE resource = $1`, req.Grant.Resource)
			}
		}
		if err := fencerules.CheckTarget(rd.bound[req.Target], req); err != nil {
			undo()
			results = append(results, func() { m.err = err })
			continue
		}
		var live *fencegate.Receipt
		if r, ok := rd.live[admitKey{req.Grant.Resource, req.Grant.FenceToken, req.Segment}]; ok {
			live = &r
		}
		prev := rd.versions[req.Target]
		verdict, rerr := fencerules.Decide(rd.rows[req.Grant.Resource], req, live)
		switch verdict {
		case fencerules.Reject:
			undo()
			results = append(results, func() { m.err = rerr })
			continue
		case fencerules.Replay:
			undo()
			results = append(results, func() { m.req.adm = fencegate.Admission{Receipt: *live, Replay: true, PreviousVersion: prev} })
			continue
		case fencerules.Quarantine:
			undo()
			putQuarantine(b, req, live)
			results = append(results, func() { m.err = rerr })
			continue
		}
		r := fencerules.NewReceipt(req)
		next := fencerules.Accepted(req)
		b.Queue(`INSERT INTO fence_receipts (`+receiptCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)`,
			receiptArgs(&r)...)
		b.Queue(`UPDATE fence_resources SET highest_fence = $2, root = $3, lease = $4, last_segment_seq = $5,
			grant_issued_at = $6, pending_receipt = $7, updated_at = $8 WHERE resource = $1`,
			next.Resource, next.HighestFence, next.Root, next.Lease, next.LastSegmentSeq,
			next.GrantIssuedAt, next.PendingReceipt, next.UpdatedAt)
		results = append(results, func() { m.req.adm = fencegate.Admission{Receipt: r, PreviousVersion: prev} })
	}
	if uncertain, err := commit(ctx, conn, b); err != nil {
		return uncertain, translate(err, "admit")
	}
	for _, set := range results {
		set()
	}
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

// read locks and reads what ms need into rd. first: round trip 1, which
// begins the transaction and only reads; otherwise it inserts the missing
// resource rows and bindings first, noting which it inserted.
func (rd *admitRead) read(ctx context.Context, conn *pgxpool.Conn, ms []*member[*admitCall], first bool) error {
	var resources, targets, tres, kres, kfence, kseg []string
	for _, m := range ms {
		req := &m.req.req
		resources = append(resources, req.Grant.Resource)
		targets = append(targets, req.Target)
		tres = append(tres, req.Grant.Resource)
		kres = append(kres, req.Grant.Resource)
		kfence = append(kfence, strconv.FormatUint(req.Grant.FenceToken, 10))
		kseg = append(kseg, strconv.FormatUint(req.Segment, 10))
	}
	b := &pgx.Batch{}
	if first {
		b.Queue(`BEGIN`)
	} else {
		// New rows are inserted in key order, as existing ones are locked:
		// an insert holds its row against a concurrent inserter of the same
		// key, so two batches inserting in arrival order could each hold a
		// row the other waits for (a deadlock, broken only after
		// deadlock_timeout by aborting one batch).
		sorted := slices.Clone(resources)
		slices.Sort(sorted)
		b.Queue(`INSERT INTO fence_resources (resource) SELECT unnest($1::text[])
			ON CONFLICT (resource) DO NOTHING RETURNING resource`, sorted)
	}
	// The lock comes before every read of receipts and bindings, so that
	// they are read (READ COMMITTED: each statement sees what committed
	// before it) after any transaction that held the lock has ended.
	b.Queue(`SELECT `+resourceCols+` FROM fence_resources WHERE resource = ANY($1::text[])
		ORDER BY resource FOR UPDATE`, resources)
	if !first {
		idx := make([]int, len(targets))
		for i := range idx {
			idx[i] = i
		}
		slices.SortFunc(idx, func(i, j int) int { return strings.Compare(targets[i], targets[j]) })
		st, sr := make([]string, len(idx)), make([]string, len(idx))
		for k, i := range idx {
			st[k], sr[k] = targets[i], tres[i]
		}
		b.Queue(`INSERT INTO fence_targets (target, resource) SELECT * FROM unnest($1::text[], $2::text[])
			ON CONFLICT (target) DO NOTHING RETURNING target`, st, sr)
	}
	b.Queue(`SELECT target, resource FROM fence_targets WHERE target = ANY($1::text[])`, targets)
	b.Queue(`SELECT `+receiptCols+` FROM fence_receipts
		JOIN unnest($1::text[], $2::text[]::numeric[], $3::text[]::numeric[]) AS k(kres, kfence, kseg)
		ON resource = kres AND fence_token = kfence AND segment = kseg
		WHERE `+liveState, kres, kfence, kseg)
	b.Queue(`SELECT target, version FROM fence_versions WHERE target = ANY($1::text[])`, targets)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if first {
		if _, err := br.Exec(); err != nil {
			return err
		}
	} else {
		if err := collect(br, func(rows pgx.Rows) error {
			var r string
			err := rows.Scan(&r)
			rd.newRes[r] = true
			return err
		}); err != nil {
			return err
		}
	}
	if err := collect(br, func(rows pgx.Rows) error {
		row, err := scanResource(rows)
		rd.rows[row.Resource] = row
		return err
	}); err != nil {
		return err
	}
	if !first {
		if err := collect(br, func(rows pgx.Rows) error {
			var t string
			err := rows.Scan(&t)
			rd.newBind[t] = true
			return err
		}); err != nil {
			return err
		}
	}
	if err := collect(br, func(rows pgx.Rows) error {
		var t, r string
		err := rows.Scan(&t, &r)
		rd.bound[t] = r
		return err
	}); err != nil {
		return err
	}
	if err := collect(br, func(rows pgx.Rows) error {
		r, err := scanReceipt(rows)
		rd.live[admitKey{r.Resource, r.FenceToken, r.Segment}] = r
		return err
	}); err != nil {
		return err
	}
	if err := collect(br, func(rows pgx.Rows) error {
		var t, v string
		err := rows.Scan(&t, &v)
		rd.versions[t] = v
		return err
	}); err != nil {
		return err
	}
	return br.Close()
}

// collect reads the next result of br row by row.
func collect(br pgx.BatchResults, each func(pgx.Rows) error) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
