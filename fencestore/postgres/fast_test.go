package postgres

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/storetest"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestContractLockedPath runs the contract suite with the fast path off, so
// the locked path (which every miss falls back to) is checked on its own.
func TestContractLockedPath(t *testing.T) {
	storetest.Run(t, func(t *testing.T) fencegate.FenceStore {
		s, err := Open(context.Background(), testenv.PostgresURL(t))
		if err != nil {
			t.Fatal(err)
		}
		s.lockedOnly = true
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// trips counts the round trips a store's pool makes: batches and single
// queries.
type trips struct{ batches, queries atomic.Int64 }

func (tr *trips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	tr.queries.Add(1)
	return ctx
}
func (tr *trips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (tr *trips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	tr.batches.Add(1)
	return ctx
}
func (tr *trips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (tr *trips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func openTraced(t *testing.T, dsn string) (*Store, *trips) {
	t.Helper()
	tr := &trips{}
	s, err := open(context.Background(), dsn, func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, tr
}

func writeReq(res string, seg uint64, id string, now time.Time) fencegate.AdmitRequest {
	return fencegate.AdmitRequest{Grant: grant(res), Segment: seg, Target: res, Method: "PUT",
		PayloadDigest: "sha256:" + id, ReceiptID: id, Now: now}
}

// TestKnownStateWritesInOneRoundTripEach: a gateway writing segments 1, 2,
// 3 ... of its resource, admitting and settling each, sends each admission
// and each settle as one pipeline (one round trip, one commit) once the
// statements are prepared, and never misses: the state it decided on is the
// state it committed last.
func TestKnownStateWritesInOneRoundTripEach(t *testing.T) {
	ctx := context.Background()
	s, tr := openTraced(t, testenv.PostgresURL(t))
	now := time.UnixMilli(1_700_000_000_000).UTC()
	for seg := uint64(1); seg <= 6; seg++ {
		b0, q0 := tr.batches.Load(), tr.queries.Load()
		id := "r-" + string(rune('0'+seg))
		adm, err := s.Admit(ctx, writeReq("res/one", seg, id, now))
		if err != nil {
			t.Fatal(err)
		}
		if want := "v-" + string(rune('0'+seg-1)); seg > 1 && adm.PreviousVersion != want {
			t.Fatalf("segment %d: previous version %q, want %q", seg, adm.PreviousVersion, want)
		}
		if _, err := s.Settle(ctx, id, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-" + string(rune('0'+seg)), Now: now}); err != nil {
			t.Fatal(err)
		}
		if b, q := tr.batches.Load()-b0, tr.queries.Load()-q0; seg > 2 && (b != 2 || q != 0) {
			t.Fatalf("segment %d: %d batches and %d queries for an admission and a settle, want 2 and 0", seg, b, q)
		}
	}
	if s.missed.Load() != 0 || s.fast.Load() != 12 {
		t.Fatalf("fast batches %d, missed %d; want 12 and 0", s.fast.Load(), s.missed.Load())
	}
	row, err := s.Resource(ctx, "res/one")
	if err != nil || row.LastSegmentSeq != 6 || row.PendingReceipt != "" {
		t.Fatalf("resource after six writes: %+v, %v", row, err)
	}
}

// TestFastPathDecidesAgainWhenAnotherGatewayMovedTheRow: gateway A knows
// res/x after segment 1; gateway B (another process on the same database)
// writes segment 2. A's segment 2 with another payload looks acceptable on
// what A knows; the compare-and-set finds the row changed, rolls back, and
// the locked path quarantines it as the rules say, leaving B's state as it
// was.
func TestFastPathDecidesAgainWhenAnotherGatewayMovedTheRow(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgresURL(t)
	a, _ := openTraced(t, dsn)
	b, _ := openTraced(t, dsn)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	commit := func(s *Store, id, v string) {
		if _, err := s.Settle(ctx, id, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: v, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Admit(ctx, writeReq("res/x", 1, "r-1", now)); err != nil {
		t.Fatal(err)
	}
	commit(a, "r-1", "v1")
	if _, err := b.Admit(ctx, writeReq("res/x", 2, "r-2b", now)); err != nil {
		t.Fatal(err)
	}
	commit(b, "r-2b", "v2")
	before, _ := a.Resource(ctx, "res/x")
	_, err := a.Admit(ctx, writeReq("res/x", 2, "r-2a", now))
	if fencegate.ErrorCode(err) != fencegate.CodeQuarantined {
		t.Fatalf("A's segment 2 after B's: %v, want QUARANTINED", err)
	}
	if a.missed.Load() != 1 {
		t.Fatalf("A missed %d times, want once", a.missed.Load())
	}
	if after, _ := a.Resource(ctx, "res/x"); after != before {
		t.Fatalf("resource moved by a quarantined segment: %+v, was %+v", after, before)
	}
	if _, err := a.Receipt(ctx, "r-2a"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("quarantined segment left a receipt: %v", err)
	}
	// A now knows the row as it read it: its segment 3 goes through.
	if _, err := a.Admit(ctx, writeReq("res/x", 3, "r-3", now)); err != nil {
		t.Fatal(err)
	}
}

// TestFastPathRefusesATargetBoundElsewhere: A knows res/p; the target it
// writes next was bound to res/q meanwhile. The binding check of the fast
// pipeline rolls it back and the locked path answers RESOURCE_MISMATCH,
// with res/p unchanged and no receipt left.
func TestFastPathRefusesATargetBoundElsewhere(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgresURL(t)
	a, _ := openTraced(t, dsn)
	b, _ := openTraced(t, dsn)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := a.Admit(ctx, writeReq("res/p", 1, "r-p1", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Settle(ctx, "r-p1", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v", Now: now}); err != nil {
		t.Fatal(err)
	}
	q := writeReq("res/q", 1, "r-q1", now)
	q.Target = "shared/key"
	if _, err := b.Admit(ctx, q); err != nil {
		t.Fatal(err)
	}
	before, _ := a.Resource(ctx, "res/p")
	p := writeReq("res/p", 2, "r-p2", now)
	p.Target = "shared/key"
	if _, err := a.Admit(ctx, p); fencegate.ErrorCode(err) != fencegate.CodeResourceMismatch {
		t.Fatalf("admission on a target bound to another resource: %v, want RESOURCE_MISMATCH", err)
	}
	if a.missed.Load() != 1 {
		t.Fatalf("A missed %d times, want once", a.missed.Load())
	}
	if after, _ := a.Resource(ctx, "res/p"); after != before {
		t.Fatalf("resource moved by a refused segment: %+v, was %+v", after, before)
	}
	if _, err := a.Receipt(ctx, "r-p2"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("refused segment left a receipt: %v", err)
	}
	if bound, _ := a.Binding(ctx, "shared/key"); bound != "res/q" {
		t.Fatalf("binding of shared/key is %q, want res/q", bound)
	}
}

// TestFoldedSettleRidesInTheNextAdmissionsRoundTrip: a gateway that folds
// each write's settle into the next admission on the resource (Prior)
// commits both in one pipeline: one round trip and one commit per write,
// the prior settled (its version the next segment's previous version) and
// the resource's pending mark moved to the new receipt.
func TestFoldedSettleRidesInTheNextAdmissionsRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, tr := openTraced(t, testenv.PostgresURL(t))
	now := time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := s.Admit(ctx, writeReq("res/fold", 1, "f-1", now)); err != nil {
		t.Fatal(err)
	}
	for seg := uint64(2); seg <= 6; seg++ {
		prev := "f-" + string(rune('0'+seg-1))
		req := writeReq("res/fold", seg, "f-"+string(rune('0'+seg)), now)
		req.Prior = &fencegate.PriorSettle{ReceiptID: prev,
			Outcome: fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-" + prev, Now: now}}
		b0, q0 := tr.batches.Load(), tr.queries.Load()
		adm, err := s.Admit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if b, q := tr.batches.Load()-b0, tr.queries.Load()-q0; seg > 2 && (b != 1 || q != 0) {
			t.Fatalf("segment %d: %d batches and %d queries, want one batch", seg, b, q)
		}
		if adm.PriorErr != nil || adm.Prior == nil || adm.Prior.State != fencegate.ReceiptCommitted || adm.PreviousVersion != "v-"+prev {
			t.Fatalf("segment %d: prior %+v (%v), previous version %q", seg, adm.Prior, adm.PriorErr, adm.PreviousVersion)
		}
		if r, err := s.Receipt(ctx, prev); err != nil || r.State != fencegate.ReceiptCommitted {
			t.Fatalf("prior %s after the admission: %+v, %v", prev, r, err)
		}
	}
	if s.missed.Load() != 0 || s.fast.Load() != 6 {
		t.Fatalf("fast batches %d, missed %d; want 6 and 0", s.fast.Load(), s.missed.Load())
	}
	if row, _ := s.Resource(ctx, "res/fold"); row.PendingReceipt != "f-6" || row.LastSegmentSeq != 6 {
		t.Fatalf("resource %+v", row)
	}
}
