package postgres

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
)

// admitKey names a segment: resource, fence, segment.
type admitKey struct {
	resource   string
	fence, seg uint64
}

// admitRead is what a locked batch reads under the resources' locks.
type admitRead struct {
	rows     map[string]fencegate.ResourceState
	bound    map[string]string
	live     map[admitKey]fencegate.Receipt
	versions map[string]string
	priors   map[string]fencegate.Receipt // the priors' receipts by ID
	newRes   map[string]bool              // resource rows this transaction inserted
	newBind  map[string]bool              // target bindings this transaction inserted
}

func newAdmitRead() *admitRead {
	return &admitRead{rows: map[string]fencegate.ResourceState{}, bound: map[string]string{},
		live: map[admitKey]fencegate.Receipt{}, versions: map[string]string{}, priors: map[string]fencegate.Receipt{},
		newRes: map[string]bool{}, newBind: map[string]bool{}}
}

// liveAt is the live receipt at req's segment, as the priors applied so far
// (settled) left it: nil if none, or if a prior settled it FAILED or
// NOT_APPLIED.
func (rd *admitRead) liveAt(req *fencegate.AdmitRequest, settled map[string]fencegate.Receipt) *fencegate.Receipt {
	r, ok := rd.live[admitKey{req.Grant.Resource, req.Grant.FenceToken, req.Segment}]
	if !ok {
		return nil
	}
	if s, ok := settled[r.ID]; ok {
		if s.State.NotApplied() {
			return nil
		}
		r = s
	}
	return &r
}

// read locks and reads what the admissions ms and the receipts to settle
// (priors: settles' and admissions' priors, given with first only) need into
// rd. first: round trip 1, which begins the transaction and only reads (the
// rows of the admissions' resources and of the priors' receipts, locked
// together in resource order, then the priors' receipts, then, if there are
// admissions, their bindings, live receipts and versions); otherwise it
// inserts the missing resource rows and bindings first, noting which it
// inserted, and what it reads for ms replaces what the first read found.
func (rd *admitRead) read(ctx context.Context, conn *pgxpool.Conn, ms []*admitCall, priors []string, first bool) error {
	var resources, targets, tres, kres, kfence, kseg []string
	for _, a := range ms {
		req := &a.req
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
		// What the first read found for these members was read before
		// their rows were locked, and may have changed since (a live
		// receipt settled NOT_APPLIED, a binding or version changed): this
		// read replaces it rather than adding to it.
		for _, a := range ms {
			req := &a.req
			delete(rd.live, admitKey{req.Grant.Resource, req.Grant.FenceToken, req.Segment})
			delete(rd.bound, req.Target)
			delete(rd.versions, req.Target)
		}
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
	// Rows are locked in byte order (COLLATE "C", Go's order: the fast path
	// locks its rows one statement at a time in slices.Sort order), not the
	// database's default collation, so that the two paths of two replicas
	// take locks in one order and do not deadlock on a server whose default
	// collation is a language's (en_US.UTF-8 orders "a-b" after "a/b").
	// The lock comes before every read of receipts and bindings, so that
	// they are read (READ COMMITTED: each statement sees what committed
	// before it) after any transaction that held the lock has ended.
	if len(priors) == 0 {
		b.Queue(`SELECT `+resourceCols+` FROM fence_resources WHERE resource = ANY($1::text[])
			ORDER BY resource COLLATE "C" FOR UPDATE`, resources)
	} else {
		// ARRAY(...) is computed once, so the rows are still found by key.
		b.Queue(`SELECT `+resourceCols+` FROM fence_resources WHERE resource = ANY(ARRAY(
				SELECT unnest($1::text[]) UNION SELECT resource FROM fence_receipts WHERE receipt_id = ANY($2::text[])))
			ORDER BY resource COLLATE "C" FOR UPDATE`, resources, priors)
		b.Queue(`SELECT `+receiptCols+` FROM fence_receipts WHERE receipt_id = ANY($1::text[])`, priors)
	}
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
	if len(ms) > 0 {
		b.Queue(`SELECT target, resource FROM fence_targets WHERE target = ANY($1::text[])`, targets)
		// Live receipts are read FOR KEY SHARE, held to the commit: the
		// resource's lock does not keep CompactReceipts (which never
		// takes it) from deleting an old settled one, which a replay
		// answers with and a quarantine record names (its foreign key
		// failed, 23503, when the delete came between). Compaction skips
		// a receipt so held (SKIP LOCKED); one it is deleting is waited
		// for and, once deleted, not found. A settle's update (FOR NO KEY
		// UPDATE) does not conflict with the lock.
		b.Queue(`SELECT `+receiptCols+` FROM fence_receipts
			JOIN unnest($1::text[], $2::text[]::numeric[], $3::text[]::numeric[]) AS k(kres, kfence, kseg)
			ON resource = kres AND fence_token = kfence AND segment = kseg
			WHERE `+liveState+` FOR KEY SHARE OF fence_receipts`, kres, kfence, kseg)
		b.Queue(`SELECT target, version FROM fence_versions WHERE target = ANY($1::text[])`, targets)
	}
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
	if len(priors) > 0 {
		if err := collect(br, func(rows pgx.Rows) error {
			r, err := scanReceipt(rows)
			rd.priors[r.ID] = r
			return err
		}); err != nil {
			return err
		}
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
	if len(ms) == 0 {
		return br.Close()
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
