package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Rule: a settle of a receipt waits for the batch that may still commit
// that receipt's admission. A gateway whose admission call gave up
// (errAbandoned: the batch runs on for its other members) queues
// NOT_APPLIED for the receipt; that settle used to run beside the batch,
// answer NOT_FOUND (a ruling the retry queue drops), and then the admission
// committed PENDING with nothing forwarded: the resource answered
// RESOURCE_BUSY until the reconciler's orphan pass. Here the admission's
// batch waits on another transaction's lock of its resource; the settle must
// wait behind it, not answer NOT_FOUND.
func TestASettleWaitsForTheBatchCarryingItsAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testenv.PostgresURL(t)
	st, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := st.Admit(ctx, writeReq("res/x", 1, "x-1", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Settle(ctx, "x-1", committed("v1", now)); err != nil {
		t.Fatal(err)
	}
	tx := otherTx(ctx, t, dsn)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM fence_resources WHERE resource = 'res/x' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var admitErr error
	go func() { defer close(done); _, admitErr = st.Admit(ctx, writeReq("res/x", 2, "x-2", now)) }()
	waitUntilBlocked(ctx, t, st, tx, done, "fence_resources", "the admission did not wait for the other transaction's lock")

	sctx, scancel := context.WithTimeout(ctx, time.Second)
	_, serr := st.Settle(sctx, "x-2", fencegate.Outcome{State: fencegate.ReceiptNotApplied, IfPending: true, Error: "given up", Now: now})
	scancel()
	if fencegate.ErrorCode(serr) == fencegate.CodeNotFound {
		t.Fatalf("the settle ran beside the batch carrying its admission and answered NOT_FOUND: %v", serr)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if admitErr != nil {
		t.Fatalf("admission: %v", admitErr)
	}
	// The settle queued behind the batch ran once it ended, or gave up
	// unsent: either way the receipt is there to be settled now.
	r, err := st.Settle(ctx, "x-2", fencegate.Outcome{State: fencegate.ReceiptNotApplied, IfPending: true, Error: "given up", Now: now})
	if err != nil || r.State != fencegate.ReceiptNotApplied {
		t.Fatalf("settle after the admission: %v, %v", r.State, err)
	}
	if row, err := st.Resource(ctx, "res/x"); err != nil || row.PendingReceipt != "" {
		t.Fatalf("res/x pending %q (%v): the resource stays busy", row.PendingReceipt, err)
	}
}
