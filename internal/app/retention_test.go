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
