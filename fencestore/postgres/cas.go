package postgres

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
)

// casStmt builds one member's statement on the fast path (fast.go): each
// write a data-modifying CTE, each changed row compared in its WHERE with
// its exact previous value (every column that can change), and one
// fence_expect requiring every comparison to have hit, so that a miss rolls
// the transaction back. Its SQL text depends only on which writes it holds,
// so pgx prepares each shape once per connection.
type casStmt struct {
	ctes []string
	hits []string
	args []any
}

// p adds an argument and returns its placeholder.
func (c *casStmt) p(v any) string {
	c.args = append(c.args, v)
	return "$" + strconv.Itoa(len(c.args))
}

func (c *casStmt) ps(vs ...any) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = c.p(v)
	}
	return strings.Join(out, ", ")
}

func (c *casStmt) cte(body string, hit bool) {
	name := "w" + strconv.Itoa(len(c.ctes))
	c.ctes = append(c.ctes, name+" AS ("+body+")")
	if hit {
		c.hits = append(c.hits, "EXISTS (SELECT 1 FROM "+name+")")
	}
}

// row changes a resource row from exactly was to next; with was nil it
// inserts next, which must not exist yet (ON CONFLICT waits for a
// concurrent inserter, then finds its row: a miss).
func (c *casStmt) row(was, next *fencegate.ResourceState) {
	if was == nil {
		c.cte(`INSERT INTO fence_resources (`+resourceCols+`) VALUES (`+c.ps(next.Resource, next.HighestFence,
			next.Root, next.Lease, next.LastSegmentSeq, next.GrantIssuedAt, next.PendingReceipt, next.UpdatedAt)+
			`) ON CONFLICT (resource) DO NOTHING RETURNING 1`, true)
		return
	}
	c.cte(`UPDATE fence_resources SET highest_fence = `+c.p(next.HighestFence)+`, root = `+c.p(next.Root)+
		`, lease = `+c.p(next.Lease)+`, last_segment_seq = `+c.p(next.LastSegmentSeq)+
		`, grant_issued_at = `+c.p(next.GrantIssuedAt)+`, pending_receipt = `+c.p(next.PendingReceipt)+
		`, updated_at = `+c.p(next.UpdatedAt)+
		` WHERE resource = `+c.p(next.Resource)+` AND highest_fence = `+c.p(was.HighestFence)+
		` AND root = `+c.p(was.Root)+` AND lease = `+c.p(was.Lease)+` AND last_segment_seq = `+c.p(was.LastSegmentSeq)+
		` AND grant_issued_at = `+c.p(was.GrantIssuedAt)+` AND pending_receipt = `+c.p(was.PendingReceipt)+
		` AND updated_at = `+c.p(was.UpdatedAt)+` RETURNING 1`, true)
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
	c.cte(`UPDATE fence_receipts SET state = `+c.p(string(next.State))+`, version = `+c.p(next.Version)+
		`, response = `+c.p(responseArg(next.Response))+`, error = `+c.p(next.Error)+
		`, settled_at = `+c.p(next.SettledAt)+`, attempts = `+c.p(next.Attempts)+`, resend = `+c.p(next.Resend)+
		`, retry_at = `+c.p(next.RetryAt)+
		` WHERE receipt_id = `+c.p(next.ID)+
		` AND (state, version, response, error, settled_at, attempts, resend, retry_at) IS NOT DISTINCT FROM (`+
		c.p(string(was.State))+`::text, `+c.p(was.Version)+`::text, `+c.p(responseArg(was.Response))+`::jsonb, `+
		c.p(was.Error)+`::text, `+c.p(was.SettledAt)+`::timestamptz, `+c.p(was.Attempts)+`::integer, `+
		c.p(was.Resend)+`::boolean, `+c.p(was.RetryAt)+`::timestamptz) RETURNING 1`, true)
	switch {
	case next.State != fencegate.ReceiptCommitted:
	case next.Version == "":
		c.cte(`DELETE FROM fence_versions WHERE target = `+c.p(next.Target), false)
	default:
		name := "w" + strconv.Itoa(len(c.ctes))
		update, insert := versionParts(c.p(next.Target), c.p(next.Version), c.p(*next.SettledAt), name)
		c.ctes = append(c.ctes, update)
		c.cte(insert, false)
	}
}

// insert adds a new receipt (the live index refuses one at a segment that
// already has a live receipt: a miss).
func (c *casStmt) insert(r *fencegate.Receipt) {
	c.cte(`INSERT INTO fence_receipts (`+receiptCols+`) VALUES (`+c.ps(receiptArgs(r)...)+`)`, false)
}

// queue adds the statement to b; what names it in a miss.
func (c *casStmt) queue(b *pgx.Batch, what string) {
	b.Queue(c.sql(what), c.args...)
}

// sql is the statement's text, its arguments c.args after.
func (c *casStmt) sql(what string) string {
	return "WITH " + strings.Join(c.ctes, ", ") + " SELECT fence_expect(" + strings.Join(c.hits, " AND ") +
		", " + c.p(what) + ")"
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
	ins AS (INSERT INTO fence_targets (target, resource) SELECT target, resource FROM w ORDER BY target
		ON CONFLICT (target) DO NOTHING RETURNING target)
	SELECT fence_expect(coalesce((SELECT bool_and(EXISTS (SELECT 1 FROM ins WHERE ins.target = w.target)
			OR EXISTS (SELECT 1 FROM fence_targets t WHERE t.target = w.target AND t.resource = w.resource)) FROM w), true),
		'target binding'),
		(SELECT coalesce(jsonb_object_agg(v.target, v.version), '{}') FROM fence_versions v WHERE v.target IN (SELECT target FROM w))`)
	return q.String(), args
}
