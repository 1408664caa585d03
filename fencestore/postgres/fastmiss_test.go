package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestAMissInTheMiddleOfAFastBatchDecidesEveryMemberAgain: gateway A knows
// res/m1, res/m2 and res/m3; gateway B then writes segment 2 of res/m2 and
// settles A's pending receipt of res/m3 (as A's fold would). A's one batch
// of three (m1 segment 2; m2 segment 2 with another payload; m3 segment 3
// folding the settle B already made) misses once, and the locked rerun
// answers each on what it reads: m1 admitted, m2 QUARANTINED with its
// record and B's state untouched, m3 admitted with its prior answered as the
// idempotent repeat it is (applied once). Then A writes on in one round trip.
func TestAMissInTheMiddleOfAFastBatchDecidesEveryMemberAgain(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgresURL(t)
	a, _ := openTraced(t, dsn)
	b, _ := openTraced(t, dsn)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	committed := fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-m3-2", Now: now}
	for _, res := range []string{"res/m1", "res/m2", "res/m3"} {
		if _, err := a.Admit(ctx, writeReq(res, 1, res+"-1", now)); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Settle(ctx, res+"-1", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1", Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Admit(ctx, writeReq("res/m3", 2, "res/m3-2", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Admit(ctx, writeReq("res/m2", 2, "res/m2-2b", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Settle(ctx, "res/m2-2b", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v2b", Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Settle(ctx, "res/m3-2", committed); err != nil {
		t.Fatal(err)
	}
	m2Before, _ := a.Resource(ctx, "res/m2")
	m3Settled, _ := a.Receipt(ctx, "res/m3-2")
	missed := a.missed.Load()

	m3 := admitMember("res/m3", "res/m3-3", 3, now)
	m3.req.req.Prior = &fencegate.PriorSettle{ReceiptID: "res/m3-2", Outcome: committed}
	ms := []*member[*admitCall]{admitMember("res/m1", "res/m1-2", 2, now), admitMember("res/m2", "res/m2-2a", 2, now), m3}
	a.runAdmits(ctx, ms)

	if a.missed.Load() != missed+1 {
		t.Fatalf("A missed %d times in the batch, want once", a.missed.Load()-missed)
	}
	if ms[0].err != nil || ms[0].req.adm.Receipt.ID != "res/m1-2" {
		t.Errorf("m1: %+v, %v", ms[0].req.adm, ms[0].err)
	}
	if fencegate.ErrorCode(ms[1].err) != fencegate.CodeQuarantined {
		t.Errorf("m2 after B's segment 2: %v, want QUARANTINED", ms[1].err)
	}
	if after, _ := a.Resource(ctx, "res/m2"); after != m2Before {
		t.Errorf("res/m2 moved by a quarantined segment: %+v, was %+v", after, m2Before)
	}
	if q, err := a.Quarantined(ctx, "res/m2", fencegate.Page{}); err != nil || len(q.Records) != 1 {
		t.Errorf("quarantine of res/m2: %+v, %v", q, err)
	}
	if ms[2].err != nil || ms[2].req.adm.Receipt.ID != "res/m3-3" || ms[2].req.adm.Prior == nil ||
		ms[2].req.adm.PreviousVersion != "v-m3-2" {
		t.Errorf("m3: %+v, %v", ms[2].req.adm, ms[2].err)
	}
	if r, _ := a.Receipt(ctx, "res/m3-2"); !r.SettledAt.Equal(*m3Settled.SettledAt) || r.Attempts != m3Settled.Attempts {
		t.Errorf("the prior B settled was settled again: %+v, was %+v", r, m3Settled)
	}
	for res, pending := range map[string]string{"res/m1": "res/m1-2", "res/m3": "res/m3-3"} {
		if row, _ := a.Resource(ctx, res); row.PendingReceipt != pending {
			t.Errorf("%s pending %q, want %q", res, row.PendingReceipt, pending)
		}
	}
	fast := a.fast.Load()
	if _, err := a.Settle(ctx, "res/m1-2", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v2", Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admit(ctx, writeReq("res/m1", 3, "res/m1-3", now)); err != nil {
		t.Fatal(err)
	}
	if a.fast.Load() != fast+2 {
		t.Errorf("after the rerun A committed %d of 2 calls on the fast path", a.fast.Load()-fast)
	}
}
