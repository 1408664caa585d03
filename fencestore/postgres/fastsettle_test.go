package postgres

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestAFastSettleThatMissesChangesNothing: gateway A admitted r-1 and knows
// it PENDING; gateway B then settles it COMMITTED (as a proof would). A's
// settle of r-1 as FAILED looks like a change on what A knows; its
// compare-and-set finds the row moved and rolls back, and the locked rerun
// refuses it (RECEIPT_SETTLED) with the receipt, the row and the target's
// version exactly as B left them.
func TestAFastSettleThatMissesChangesNothing(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgresURL(t)
	a, _ := openTraced(t, dsn)
	b, _ := openTraced(t, dsn)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := a.Admit(ctx, writeReq("res/s", 1, "r-1", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Settle(ctx, "r-1", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-b", Now: now}); err != nil {
		t.Fatal(err)
	}
	rowBefore, _ := a.Resource(ctx, "res/s")
	rcptBefore, _ := a.Receipt(ctx, "r-1")
	missed := a.missed.Load()

	_, err := a.Settle(ctx, "r-1", fencegate.Outcome{State: fencegate.ReceiptFailed, Error: "lost", Now: now.Add(time.Second)})
	if fencegate.ErrorCode(err) != fencegate.CodeReceiptSettled {
		t.Fatalf("A's settle of a receipt B settled: %v, want RECEIPT_SETTLED", err)
	}
	if a.missed.Load() != missed+1 {
		t.Fatalf("A missed %d times, want once", a.missed.Load()-missed)
	}
	if after, _ := a.Resource(ctx, "res/s"); after != rowBefore {
		t.Errorf("resource moved by a refused settle: %+v, was %+v", after, rowBefore)
	}
	if after, _ := a.Receipt(ctx, "r-1"); !reflect.DeepEqual(after, rcptBefore) {
		t.Errorf("receipt moved by a refused settle: %+v, was %+v", after, rcptBefore)
	}
	if v, err := a.Version(ctx, "res/s"); err != nil || v != "v-b" {
		t.Errorf("version of res/s %q (%v), want v-b", v, err)
	}
}
