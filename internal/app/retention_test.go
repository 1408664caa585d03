package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/fencestore/memory"
	"github.com/fencegate/fencegate/gateway"
)

// TestCompactOnceDeletesInBatchesUpToTheAge: a pass deletes every receipt
// settled more than retention.settledReceipts ago, batch after batch, and
// keeps the younger ones and the resource's last segment.
func TestCompactOnceDeletesInBatchesUpToTheAge(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	g := fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: "local/r", Owner: "o", Lease: "l", FenceToken: 1,
		OperationID: "op", OperationRoot: "root", IssuedAt: 1}, Digest: "sha256:g"}
	for seg := uint64(1); seg <= 7; seg++ {
		at := now.Add(-48 * time.Hour).Add(time.Duration(seg) * time.Minute) // segments 1..6 are old
		if seg == 7 {
			at = now.Add(-time.Hour)
		}
		id := fmt.Sprintf("r%d", seg)
		if _, err := s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: seg, Target: "local/r", Method: "PUT",
			PayloadDigest: "sha256:" + id, ReceiptID: id, Now: at}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Settle(ctx, id, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: id, Now: at}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.Retention = config.Retention{SettledReceipts: 24 * time.Hour, Interval: time.Minute, Batch: 2}
	a := &App{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), reconciler: &gateway.Reconciler{Store: s}}
	n, err := a.compactOnce(ctx, s, now)
	if err != nil || n != 6 {
		t.Fatalf("compactOnce = %d, %v; want the 6 receipts older than a day", n, err)
	}
	if _, err := s.Receipt(ctx, "r7"); err != nil {
		t.Fatalf("the young receipt is gone: %v", err)
	}
	if _, err := s.Receipt(ctx, "r6"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("an old receipt is kept: %v", err)
	}
}

// TestRetentionPassDeletesOldQuarantineThenTheReceiptsItPinned: a pass with
// retention.quarantine set deletes, batch after batch, the quarantine
// records last attempted more than that long ago and keeps a record hit
// again since; it runs before the receipt pass, so a receipt only a
// deleted record kept goes in the same pass, while the one the kept record
// names stays. With retention.quarantine 0 nothing of the quarantine goes.
func TestRetentionPassDeletesOldQuarantineThenTheReceiptsItPinned(t *testing.T) {
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	old := now.Add(-48 * time.Hour)
	setup := func() *memory.Store {
		s := memory.New()
		g := fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: "local/r", Owner: "o", Lease: "l", FenceToken: 1,
			OperationID: "op", OperationRoot: "root", IssuedAt: 1}, Digest: "sha256:g"}
		req := func(seg uint64, payload string, at time.Time) fencegate.AdmitRequest {
			return fencegate.AdmitRequest{Grant: g, Segment: seg, Target: "local/r", Method: "PUT",
				PayloadDigest: "sha256:" + payload, ReceiptID: fmt.Sprintf("r-%d-%s", seg, payload), Now: at}
		}
		for seg := uint64(1); seg <= 3; seg++ {
			id := fmt.Sprintf("r%d", seg)
			r := req(seg, id, old)
			r.ReceiptID = id
			if _, err := s.Admit(ctx, r); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Settle(ctx, id, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: id, Now: old}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 { // three old records naming r1
			if _, err := s.Admit(ctx, req(1, fmt.Sprintf("other%d", i), old)); fencegate.ErrorCode(err) != fencegate.CodeQuarantined {
				t.Fatalf("another payload: %v", err)
			}
		}
		for _, at := range []time.Time{old, now.Add(-time.Hour)} { // a record naming r2, hit again an hour ago
			if _, err := s.Admit(ctx, req(2, "again", at)); fencegate.ErrorCode(err) != fencegate.CodeQuarantined {
				t.Fatalf("another payload: %v", err)
			}
		}
		return s
	}
	appFor := func(s *memory.Store, r config.Retention) *App {
		cfg := config.Default()
		cfg.Retention = r
		return &App{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), reconciler: &gateway.Reconciler{Store: s}}
	}

	s := setup()
	a := appFor(s, config.Retention{SettledReceipts: 24 * time.Hour, Quarantine: 24 * time.Hour, Interval: time.Minute, Batch: 2})
	if n, err := a.compactQuarantineOnce(ctx, s, now); err != nil || n != 3 {
		t.Fatalf("compactQuarantineOnce = %d, %v; want the 3 records last attempted two days ago", n, err)
	}
	s = setup()
	a = appFor(s, config.Retention{SettledReceipts: 24 * time.Hour, Quarantine: 24 * time.Hour, Interval: time.Minute, Batch: 2})
	a.retentionPass(ctx, s, now)
	page, err := s.Quarantined(ctx, "", fencegate.Page{})
	if err != nil || len(page.Records) != 1 || page.Records[0].ReceiptID != "r2" {
		t.Fatalf("quarantine after the pass: %+v, %v; want the record hit an hour ago", page.Records, err)
	}
	if _, err := s.Receipt(ctx, "r1"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("r1, named only by deleted records, is kept: %v", err)
	}
	for _, id := range []string{"r2", "r3"} { // named by the kept record; the last segment
		if _, err := s.Receipt(ctx, id); err != nil {
			t.Fatalf("%s is gone: %v", id, err)
		}
	}

	s = setup()
	a = appFor(s, config.Retention{SettledReceipts: 24 * time.Hour, Interval: time.Minute, Batch: 2})
	a.retentionPass(ctx, s, now)
	if page, err := s.Quarantined(ctx, "", fencegate.Page{}); err != nil || len(page.Records) != 4 {
		t.Fatalf("quarantine with retention.quarantine 0: %d records, %v; want all 4", len(page.Records), err)
	}
	if _, err := s.Receipt(ctx, "r1"); err != nil {
		t.Fatalf("r1, named by a kept record, is gone: %v", err)
	}
}
