package embedded_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// TestLayoutOneFileGetsTheByResourceIndex: a file written before the
// by-resource index existed (no byres bucket, no layout mark) is upgraded when
// opened: its receipts are listed by resource like new ones.
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
}
