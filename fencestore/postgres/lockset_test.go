package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestSettleOfAReceiptAdmittedWhileItsBatchWaitsLocksItsRow: a locked batch
// chooses the rows it locks once, then waits (here for res/q, which
// another transaction holds). A receipt it settles that did not exist then
// (x-1; the gateway settles such a one NOT_APPLIED after an admission whose
// answer it lost) is admitted meanwhile by another replica. The settle must
// still take res/x's row with it: the receipt NOT_APPLIED, the row no
// longer naming it pending and its segment given back, so the resource
// takes new admissions. Before readLocked the settle ran without the row,
// and every later admission on res/x was RESOURCE_BUSY for good.
func TestSettleOfAReceiptAdmittedWhileItsBatchWaitsLocksItsRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testenv.PostgresURL(t)
	a, err := Open(ctx, dsn) // the replica whose batch waits
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, dsn) // another replica
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := a.Admit(ctx, writeReq("res/q", 1, "q-1", now)); err != nil {
		t.Fatal(err)
	}
	tx := otherTx(ctx, t, dsn)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM fence_resources WHERE resource = 'res/q' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	notApplied := fencegate.Outcome{State: fencegate.ReceiptNotApplied, Error: "nothing forwarded", Now: now}
	ms := []*member[*writeCall]{settleW("q-1", committed("v-q", now)), settleW("x-1", notApplied)}
	done := make(chan struct{})
	go func() { defer close(done); a.runWrites(ctx, ms) }()
	waitUntilBlocked(ctx, t, a, tx, done, "ORDER BY resource FOR UPDATE", "the batch did not wait for res/q")
	if _, err := b.Admit(ctx, writeReq("res/x", 1, "x-1", now)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	for i, m := range ms {
		if m.err != nil {
			t.Fatalf("member %d: %v", i, m.err)
		}
	}
	r, err := b.Receipt(ctx, "x-1")
	if err != nil {
		t.Fatal(err)
	}
	row, err := b.Resource(ctx, "res/x")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != fencegate.ReceiptNotApplied || row.PendingReceipt != "" || row.LastSegmentSeq != 0 {
		t.Fatalf("receipt x-1 %s, res/x pending %q at segment %d: want NOT_APPLIED, nothing pending, segment 0",
			r.State, row.PendingReceipt, row.LastSegmentSeq)
	}
	next := writeReq("res/x", 1, "x-2", now)
	next.Grant.FenceToken = 10
	if _, err := b.Admit(ctx, next); err != nil {
		t.Fatalf("a new admission on res/x: %v", err)
	}
}
