package postgres

import (
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
)

// casStmt builds one member's statement on the fast path (fast.go): each
// write a data-modifying CTE, each changed row compared in its WHERE with
// its exact previous value (every column that can change), and one
// fence_expect requiring every comparison to have hit, so that a miss rolls
// the transaction back. Its SQL text depends only on which writes it holds,
// in order (its shape), so the text is built once per shape in this process
// (casText) and pgx prepares it once per connection; a statement itself
// only collects its arguments.
type casStmt struct {
	shape []byte // one cas* code per write, in order
	args  []any
}

// newCASStmt is an empty statement with room for the largest a member
// builds (an admission with a prior: 15 + 17 + 3 + receiptArgCount + 1
// arguments), so that collecting them does not grow the slice.
func newCASStmt() *casStmt {
	return &casStmt{shape: make([]byte, 0, 4), args: make([]any, 0, 15+17+3+receiptArgCount+1)}
}

// The writes a casStmt can hold, with the number of arguments each takes.
const (
	casRowInsert    = 'i' // a new resource row: 8
	casRowUpdate    = 'u' // a resource row from exactly was to next: 15
	casSettle       = 's' // a receipt from exactly was to next: 17
	casVersionGone  = 'd' // a target's version forgotten: 1
	casVersionSet   = 'v' // a target's version set: 3
	casReceiptAdded = 'r' // a new receipt: len(receiptArgs)
)

// num is a numeric(20,0) argument (fences, segments): its decimal text,
// which pgx sends in text format and Postgres parses as the column's
// numeric. A uint64 would go through pgx's binary numeric encoding, a
// math/big conversion per value; text costs one small string, none below
// 100 (strconv keeps those).
func num(u uint64) string { return strconv.FormatUint(u, 10) }

// row changes a resource row from exactly was to next; with was nil it
// inserts next, which must not exist yet (ON CONFLICT waits for a
// concurrent inserter, then finds its row: a miss).
func (c *casStmt) row(was, next *fencegate.ResourceState) {
	if was == nil {
		c.shape = append(c.shape, casRowInsert)
		c.args = append(c.args, next.Resource, num(next.HighestFence), next.Root, next.Lease,
			num(next.LastSegmentSeq), next.GrantIssuedAt, next.PendingReceipt, next.UpdatedAt)
		return
	}
	c.shape = append(c.shape, casRowUpdate)
	c.args = append(c.args, num(next.HighestFence), next.Root, next.Lease, num(next.LastSegmentSeq),
		next.GrantIssuedAt, next.PendingReceipt, next.UpdatedAt, next.Resource,
		num(was.HighestFence), was.Root, was.Lease, num(was.LastSegmentSeq), was.GrantIssuedAt,
		was.PendingReceipt, was.UpdatedAt)
}

// settled moves a receipt from exactly was to next and, for COMMITTED,
// sets (or forgets) its target's version as queueSettled does. The
// previous value is compared as one row (IS NOT DISTINCT FROM, exact for
// these columns, NULL equal to NULL), which no index can answer, so the
// receipt is found through its primary key: with state = $n beside
// receipt_id = $m the planner could take fence_receipts_by_state (state,
// created_at, receipt_id) for a generic plan, and that walks every PENDING
// entry (the dead ones of receipts settled since the last vacuum too) to
// find the one receipt.
func (c *casStmt) settled(was, next *fencegate.Receipt) {
	c.shape = append(c.shape, casSettle)
	c.args = append(c.args, string(next.State), next.Version, responseArg(next.Response), next.Error,
		next.SettledAt, next.Attempts, next.Resend, next.RetryAt, next.ID,
		string(was.State), was.Version, responseArg(was.Response), was.Error, was.SettledAt, was.Attempts,
		was.Resend, was.RetryAt)
	switch {
	case next.State != fencegate.ReceiptCommitted:
	case next.Version == "":
		c.shape = append(c.shape, casVersionGone)
		c.args = append(c.args, next.Target)
	default:
		c.shape = append(c.shape, casVersionSet)
		c.args = append(c.args, next.Target, next.Version, *next.SettledAt)
	}
}

// insert adds a new receipt (the live index refuses one at a segment that
// already has a live receipt: a miss).
func (c *casStmt) insert(r *fencegate.Receipt) {
	c.shape = append(c.shape, casReceiptAdded)
	c.args = appendReceiptArgs(c.args, r)
}

// queue adds the statement to b; what names it in a miss.
func (c *casStmt) queue(b *pgx.Batch, what string) {
	q := c.sql(what) // appends what: c.args is read after
	b.Queue(q, c.args...)
}

// sql adds what (the name a miss reports) as the last argument and returns
// the statement's text, its arguments c.args.
func (c *casStmt) sql(what string) string {
	c.args = append(c.args, what)
	return casText(c.shape)
}

// casTexts holds the text of every shape built so far: a handful (an
// admission with or without a prior and a new or known row, a settle with
// or without a version).
var casTexts struct {
	sync.RWMutex
	m map[string]string
}

// casText is the statement text of shape, built once.
func casText(shape []byte) string {
	casTexts.RLock()
	q, ok := casTexts.m[string(shape)]
	casTexts.RUnlock()
	if ok {
		return q
	}
	q = buildCAS(shape)
	casTexts.Lock()
	if casTexts.m == nil {
		casTexts.m = map[string]string{}
	}
	casTexts.m[string(shape)] = q
	casTexts.Unlock()
	return q
}

// buildCAS spells shape's statement, numbering its placeholders in the
// order the writes' methods append their arguments.
func buildCAS(shape []byte) string {
	var (
		n          int
		ctes, hits []string
	)
	p := func() string { n++; return "$" + strconv.Itoa(n) }
	ps := func(k int) string {
		out := make([]string, k)
		for i := range out {
			out[i] = p()
		}
		return strings.Join(out, ", ")
	}
	name := func() string { return "w" + strconv.Itoa(len(ctes)) }
	cte := func(body string, hit bool) {
		w := name()
		ctes = append(ctes, w+" AS ("+body+")")
		if hit {
			hits = append(hits, "EXISTS (SELECT 1 FROM "+w+")")
		}
	}
	for _, k := range shape {
		switch k {
		case casRowInsert:
			cte(`INSERT INTO fence_resources (`+resourceCols+`) VALUES (`+ps(8)+
				`) ON CONFLICT (resource) DO NOTHING RETURNING 1`, true)
		case casRowUpdate:
			cte(`UPDATE fence_resources SET highest_fence = `+p()+`, root = `+p()+`, lease = `+p()+
				`, last_segment_seq = `+p()+`, grant_issued_at = `+p()+`, pending_receipt = `+p()+
				`, updated_at = `+p()+` WHERE resource = `+p()+` AND highest_fence = `+p()+
				` AND root = `+p()+` AND lease = `+p()+` AND last_segment_seq = `+p()+
				` AND grant_issued_at = `+p()+` AND pending_receipt = `+p()+` AND updated_at = `+p()+` RETURNING 1`, true)
		case casSettle:
			cte(`UPDATE fence_receipts SET state = `+p()+`, version = `+p()+`, response = `+p()+`, error = `+p()+
				`, settled_at = `+p()+`, attempts = `+p()+`, resend = `+p()+`, retry_at = `+p()+
				` WHERE receipt_id = `+p()+
				` AND (state, version, response, error, settled_at, attempts, resend, retry_at) IS NOT DISTINCT FROM (`+
				p()+`::text, `+p()+`::text, `+p()+`::jsonb, `+p()+`::text, `+p()+`::timestamptz, `+p()+`::integer, `+
				p()+`::boolean, `+p()+`::timestamptz) RETURNING 1`, true)
		case casVersionGone:
			cte(`DELETE FROM fence_versions WHERE target = `+p(), false)
		case casVersionSet:
			w := name()
			target, version, at := p(), p(), p()
			update, insert := versionParts(target, version, at, w)
			ctes = append(ctes, update)
			cte(insert, false)
		case casReceiptAdded:
			cte(`INSERT INTO fence_receipts (`+receiptCols+`) VALUES (`+ps(receiptArgCount)+`)`, false)
		default:
			panic("postgres: unknown casStmt write " + string(k))
		}
	}
	return "WITH " + strings.Join(ctes, ", ") + " SELECT fence_expect(" + strings.Join(hits, " AND ") + ", " + p() + ")"
}

// bindAndRead is the statement that binds each target targets[i] to
// bound[i] unless it is bound already and requires it bound to bound[i]
// after; then reads the versions of the targets. It runs after the row
// locks, so it reads what committed before them, and after the members' own
// writes, which it sees. The pairs are a VALUES list, one text per batch
// size, rather than arrays: with an array the planner cannot know the
// number of rows of a generic plan, prices it above the custom ones and
// plans the statement again on every execution (pg_stat_statements: a plan
// per call, about 0.2 ms of server CPU each); with VALUES the plan cached
// after the fifth execution serves every later one.
func bindAndRead(targets, bound []string) (string, []any) {
	var q strings.Builder
	args := make([]any, 0, 2*len(targets))
	q.WriteString(`WITH w (target, resource) AS (VALUES `)
	for i := range targets {
		if i > 0 {
			q.WriteString(", ")
		}
		args = append(args, targets[i], bound[i])
		q.WriteString("($" + strconv.Itoa(2*i+1) + "::text, $" + strconv.Itoa(2*i+2) + "::text)")
	}
	q.WriteString(`),
	ins AS (INSERT INTO fence_targets (target, resource) SELECT target, resource FROM w ORDER BY target COLLATE "C"
		ON CONFLICT (target) DO NOTHING RETURNING target)
	SELECT fence_expect(coalesce((SELECT bool_and(EXISTS (SELECT 1 FROM ins WHERE ins.target = w.target)
			OR EXISTS (SELECT 1 FROM fence_targets t WHERE t.target = w.target AND t.resource = w.resource)) FROM w), true),
		'target binding'),
		(SELECT coalesce(jsonb_object_agg(v.target, v.version), '{}') FROM fence_versions v WHERE v.target IN (SELECT target FROM w))`)
	return q.String(), args
}
