package embedded_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// TestLayoutOneFileGetsTheByResourceIndex: a file written before the
// by-resource index existed (no byres bucket, no layout mark, a quarantine
// record per attempt) is upgraded when opened: its receipts are listed by
// resource like new ones, and repeated quarantine records are merged into one
// with their count as attempts.
func TestLayoutOneFileGetsTheByResourceIndex(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s := open(t, path)
	g := fencegate.VerifiedGrant{Grant: fencegate.Grant{
		Resource: "res/a", Owner: "o", Lease: "l", FenceToken: 3, OperationID: "op", OperationRoot: "r", IssuedAt: 1,
	}, Digest: "sha256:g"}
	now := time.UnixMilli(1_700_000_000_000).UTC()
	for i, id := range []string{"r1", "r2"} {
		adm, err := s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: uint64(i + 1), Target: "res/a", Method: "PUT",
			PayloadDigest: "sha256:" + id, ReceiptID: id, Now: now.Add(time.Duration(i) * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v", Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()

	// Turn the file back into layout 1.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte("byres")); err != nil {
			return err
		}
		// Layout 1 quarantine: a record per attempt, keyed by a sequence,
		// without ID, target or method; here one request twice and another once.
		q := tx.Bucket([]byte("quarantine"))
		for i, digest := range []string{"sha256:x", "sha256:x", "sha256:y"} {
			rec := fmt.Sprintf(`{"resource":"res/a","fenceToken":3,"segment":1,"receiptId":"r1","payloadDigest":%q,"owner":"o","at":"2026-01-01T00:00:0%dZ"}`, digest, i)
			key := append([]byte("res/a\x00"), byte(i))
			if err := q.Put(key, []byte(rec)); err != nil {
				return err
			}
		}
		return tx.DeleteBucket([]byte("meta"))
	})
	_ = db.Close()
	if err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	defer s.Close()
	p, err := s.ReceiptsByResource(ctx, "res/a", fencegate.Page{})
	if err != nil || len(p.Receipts) != 2 || p.Receipts[0].ID != "r1" || p.Receipts[1].ID != "r2" {
		t.Fatalf("ReceiptsByResource after the upgrade = %+v, %v; want r1, r2", p.Receipts, err)
	}
	qp, err := s.Quarantined(ctx, "res/a", fencegate.Page{})
	if err != nil || len(qp.Records) != 2 || qp.Records[0].PayloadDigest != "sha256:x" || qp.Records[0].Attempts != 2 ||
		!qp.Records[0].LastAt.After(qp.Records[0].At) || qp.Records[1].Attempts != 1 {
		t.Fatalf("quarantine after the upgrade = %+v, %v; want x (2 attempts) and y", qp.Records, err)
	}
	if got, err := s.QuarantineRecord(ctx, qp.Records[1].ID); err != nil || got.PayloadDigest != "sha256:y" {
		t.Fatalf("QuarantineRecord(%s) = %+v, %v", qp.Records[1].ID, got, err)
	}
}
