package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestBatchesInsertNewRowsInOneOrder: two batches that both see resources
// for the first time insert their rows (INSERT ... ON CONFLICT DO NOTHING,
// which waits for a concurrent inserter of the same key). They must insert in
// one order, the resources' order as for the locks of existing rows, or each
// can hold a row the other waits for: a deadlock, which Postgres breaks only
// after deadlock_timeout by aborting one batch. Here another transaction
// (standing for a batch) inserts res/a and then res/b; the batch with
// members res/b and res/a (in that arrival order) must wait for res/a without
// holding res/b, so the other's insert of res/b goes through at once.
func TestBatchesInsertNewRowsInOneOrder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testenv.PostgresURL(t)
	st, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	tx := otherTx(ctx, t, dsn)
	if _, err := tx.Exec(ctx, `INSERT INTO fence_resources (resource) VALUES ('res/a')`); err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_700_000_000_000).UTC()
	ms := []*member[*admitCall]{admitMember("res/b", "r-b", 1, now), admitMember("res/a", "r-a", 1, now)}
	done := make(chan struct{})
	go func() { defer close(done); st.runAdmits(ctx, ms) }()

	// Wait until the batch waits for the other transaction's row.
	waitUntilBlocked(ctx, t, st, tx, done, "INSERT INTO fence_resources", "the batch did not wait for the other transaction's uncommitted row")
	insertThenRelease(ctx, t, tx, "res/b", "the batch holds res/b while it waits for res/a (%s): batches inserting in arrival order deadlock")
	<-done
	wantNoMemberErr(t, ms)
}

// TestFastBatchLocksExistingRowsBeforeInsertingNewOnes: a fast batch changes
// the rows it knows before it inserts new ones, as the locked path locks
// every existing row (round trip 1) before inserting (round trip 2). Were it
// to go in plain resource order, it could hold a new row res/a while waiting
// for res/b, which a locked batch holds while it waits to insert res/a: a
// deadlock. Here another transaction holds res/b; the fast batch with
// members res/a (new) and res/b (known) must wait for it without holding
// res/a, so the other's insert of res/a goes through at once.
func TestFastBatchLocksExistingRowsBeforeInsertingNewOnes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testenv.PostgresURL(t)
	st, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := st.Admit(ctx, admitMember("res/b", "r-b1", 1, now).req.req); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Settle(ctx, "r-b1", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v", Now: now}); err != nil {
		t.Fatal(err)
	}
	tx := otherTx(ctx, t, dsn)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM fence_resources WHERE resource = 'res/b' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	ms := []*member[*admitCall]{admitMember("res/a", "r-a1", 1, now), admitMember("res/b", "r-b2", 2, now)}
	done := make(chan struct{})
	go func() { defer close(done); st.runAdmits(ctx, ms) }()
	waitUntilBlocked(ctx, t, st, tx, done, "UPDATE fence_resources", "the batch did not wait for the other transaction's lock of res/b")
	insertThenRelease(ctx, t, tx, "res/a", "the fast batch holds new row res/a while it waits for res/b (%s)")
	<-done
	wantNoMemberErr(t, ms)
}

// waitUntilBlocked returns once a statement like like waits for a lock (the
// batch running until done is blocked behind tx), then bounds tx's own lock
// waits, so that a deadlock shows as 55P03 instead of hanging the test.
func waitUntilBlocked(ctx context.Context, t *testing.T, st *Store, tx pgx.Tx, done <-chan struct{}, like, notBlocked string) {
	t.Helper()
	for waiting := false; !waiting; {
		if err := st.pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, like).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
			t.Fatal(notBlocked)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '500ms'`); err != nil {
		t.Fatal(err)
	}
}

// otherTx begins a transaction on its own connection (standing for another
// batch), rolled back at the test's end.
func otherTx(ctx context.Context, t *testing.T, dsn string) pgx.Tx {
	t.Helper()
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close(context.Background()) })
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// insertThenRelease inserts res's row in tx, failing with deadlock (given
// the error code) if the blocked batch holds it, then rolls tx back so the
// batch goes on.
func insertThenRelease(ctx context.Context, t *testing.T, tx pgx.Tx, res, deadlock string) {
	t.Helper()
	_, err := tx.Exec(ctx, `INSERT INTO fence_resources (resource) VALUES ($1)`, res)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "40P01") {
		t.Fatalf(deadlock, pe.Code)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}

func wantNoMemberErr(t *testing.T, ms []*member[*admitCall]) {
	t.Helper()
	for _, m := range ms {
		if m.err != nil {
			t.Errorf("member %s: %v", m.req.req.Grant.Resource, m.err)
		}
	}
}
