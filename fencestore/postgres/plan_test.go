package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestFastStatementsKeepOneGenericPlan: a session that runs the fast
// path's binding statement (for one and for three targets) more than five
// times plans it no more than those five times; later executions use the
// cached generic plan (pg_prepared_statements counts both), so the server
// does not plan it again on every admission batch.
func TestFastStatementsKeepOneGenericPlan(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgresURL(t)
	cc, err := pgx.ParseConfig(dsn)
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
	defer conn.Close(ctx)
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
