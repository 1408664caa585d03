package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestFastStatementsKeepOneGenericPlan: a session that runs the fast
// path's binding statement (for one and for three targets) more than five
// times plans it no more than those five times; later executions use the
// cached generic plan (pg_prepared_statements counts both), so the server
// does not plan it again on every admission batch.
func TestFastStatementsKeepOneGenericPlan(t *testing.T) {
	ctx := context.Background()
	conn := migratedConn(ctx, t)
	for _, n := range []int{1, 3} {
		var targets, bound []string
		for i := range n {
			targets = append(targets, fmt.Sprintf("plan/%d/t%d", n, i))
			bound = append(bound, fmt.Sprintf("plan/%d/r%d", n, i))
		}
		q, args := bindAndRead(targets, bound)
		for range 12 {
			var ok bool
			var versions map[string]string
			if err := conn.QueryRow(ctx, q, args...).Scan(&ok, &versions); err != nil || !ok {
				t.Fatalf("n=%d: %v %v", n, ok, err)
			}
		}
		var generic, custom int64
		if err := conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, q).
			Scan(&generic, &custom); err != nil {
			t.Fatalf("n=%d: not prepared: %v", n, err)
		}
		if custom > 5 || generic < 7 {
			t.Fatalf("n=%d: %d custom plans and %d generic ones in 12 executions, want at most 5 custom", n, custom, generic)
		}
	}
}

// TestFastSettleFindsItsReceiptByKey: the fast settle's statement, planned
// generic (as a session's cached plan is after five runs) on a fresh
// store, reaches the receipt through fence_receipts_pkey, never through
// fence_receipts_by_state, whose PENDING entries it would otherwise walk.
func TestFastSettleFindsItsReceiptByKey(t *testing.T) {
	ctx := context.Background()
	conn := migratedConn(ctx, t)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	row := fencegate.ResourceState{Resource: "plan/r", HighestFence: 1, PendingReceipt: "r1", UpdatedAt: now}
	nextRow := row
	nextRow.PendingReceipt = ""
	was := fencegate.Receipt{ID: "r1", Resource: "plan/r", Target: "plan/r", State: fencegate.ReceiptPending, CreatedAt: now}
	next := was
	next.State, next.Version, next.SettledAt = fencegate.ReceiptCommitted, "v1", &now
	c := &casStmt{}
	c.row(&row, &nextRow)
	c.settled(&was, &next)
	q := c.sql("plan/r")
	if _, err := conn.Prepare(ctx, "settle", q); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
		t.Fatal(err)
	}
	// EXPLAIN takes no parameters: the values go in as literals, which
	// take the prepared statement's parameter types.
	lits := make([]string, len(c.args))
	for i, a := range c.args {
		lits[i] = literal(a)
	}
	text := explain(ctx, t, conn, `EXECUTE settle(`+strings.Join(lits, ", ")+`)`)
	if !strings.Contains(text, "fence_receipts_pkey") || strings.Contains(text, "fence_receipts_by_state") {
		t.Fatalf("the settle's generic plan does not find the receipt by its key:\n%s", text)
	}
}

// explain returns the plan Postgres chooses for statement on conn (EXPLAIN's
// lines, joined).
func explain(ctx context.Context, t *testing.T, conn *pgx.Conn, statement string) string {
	t.Helper()
	rows, err := conn.Query(ctx, `EXPLAIN `+statement)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "\n")
}

// literal spells a casStmt argument as an SQL literal.
func literal(a any) string {
	switch v := a.(type) {
	case nil:
		return "NULL"
	case *time.Time:
		if v == nil {
			return "NULL"
		}
		return literal(*v)
	case time.Time:
		return "'" + v.Format(time.RFC3339Nano) + "'"
	case []byte:
		return "'" + strings.ReplaceAll(string(v), "'", "''") + "'"
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	default:
		return "'" + fmt.Sprint(v) + "'"
	}
}

// migratedConn is a connection of its own to the test server, with the
// store's migrations applied; it closes when t ends.
func migratedConn(ctx context.Context, t *testing.T) *pgx.Conn {
	t.Helper()
	cc, err := pgx.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, cc); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}
