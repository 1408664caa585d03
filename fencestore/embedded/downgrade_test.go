package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// olderBinary runs fn on the file at path the way a binary of layout 3 or
// older opens it: it does not refuse a newer layout (it upgrades only files
// older than its own), creates the live bucket it knows (Open's
// CreateBucketIfNotExists), and keeps its live index there. It knows no
// journal: fn may use this package's helpers, which write into the journal,
// and what they wrote is then moved into the big trees, where that binary
// writes.
func olderBinary(t *testing.T, path string, fn func(tx *bolt.Tx, live *bolt.Bucket) error) {
	t.Helper()
	rewriteFile(t, path, func(tx *bolt.Tx) error {
		if !journalEmpty(tx) {
			return errors.New("olderBinary: the journal is not empty before it runs")
		}
		live, err := tx.CreateBucketIfNotExists(bLive)
		if err != nil {
			return err
		}
		if err := fn(tx, live); err != nil {
			return err
		}
		_, _, err = mergeJournal(tx, math.MaxInt)
		return err
	})
}

// rewriteFile runs fn in one bbolt transaction on the closed store file at
// path, to make it what older code wrote, and closes it again.
func rewriteFile(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(fn)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// oldLiveKey is layout 3's live key: resource 0 fence segment.
func oldLiveKey(resource string, fence, segment uint64) []byte {
	return join([]byte(resource), u64(fence), u64(segment))
}

// TestFileUsedByAnOlderBinaryAfterTheUpgradeIsRepaired: a layout 4 file
// opened meanwhile by an older binary (a rollback) keeps the live receipts
// that binary admitted in its own live bucket and cannot drop the entries
// in byres of the receipts it settled NOT_APPLIED or compacted. Open
// repairs the index: a receipt that binary admitted is found and replayed,
// a segment it freed is accepted again, and the live bucket is gone.
func TestFileUsedByAnOlderBinaryAfterTheUpgradeIsRepaired(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s := openAt(t, path)
	freed := admitReq("res/freed", 1, "rcpt_freed")  // admitted here, NOT_APPLIED by the older binary
	again := admitReq("res/again", 1, "rcpt_again1") // the same, then admitted again by it
	gone := admitReq("res/gone", 1, "rcpt_gone")     // committed here, compacted by it
	for _, req := range []fencegate.AdmitRequest{freed, again, gone, admitReq("res/gone", 2, "rcpt_gone2")} {
		if _, err := s.Admit(ctx, req); err != nil {
			t.Fatal(err)
		}
		if req.Grant.Resource == "res/gone" {
			if _, err := s.Settle(ctx, req.ReceiptID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v", Now: req.Now}); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = s.Close()

	olderBinary(t, path, func(tx *bolt.Tx, live *bolt.Bucket) error {
		// Settle freed and again NOT_APPLIED: their live entries are not
		// in its live bucket, so nothing is dropped.
		for _, id := range []string{freed.ReceiptID, again.ReceiptID} {
			r, err := getReceipt(tx, id)
			if err != nil {
				return err
			}
			prev := r.State
			r.State = fencegate.ReceiptNotApplied
			if err := putReceipt(tx, &r, prev); err != nil {
				return err
			}
			row, _, err := getResource(tx, r.Resource)
			if err != nil {
				return err
			}
			row.LastSegmentSeq, row.PendingReceipt = 0, ""
			if err := putResource(tx, &row); err != nil {
				return err
			}
			_ = live.Delete(oldLiveKey(r.Resource, r.FenceToken, r.Segment))
		}
		// Admit again's segment once more, into its own live bucket.
		req := admitReq("res/again", 1, "rcpt_again2")
		r := fencegate.Receipt{ID: req.ReceiptID, Resource: req.Grant.Resource, Target: req.Target, Method: req.Method,
			FenceToken: req.Grant.FenceToken, Segment: 1, OperationID: req.Grant.OperationID, OperationRoot: req.Grant.OperationRoot,
			Lease: req.Grant.Lease, Owner: req.Grant.Owner, GrantDigest: req.Grant.Digest, PayloadDigest: req.PayloadDigest,
			State: fencegate.ReceiptPending, CreatedAt: req.Now.Add(1)}
		if err := putReceipt(tx, &r, ""); err != nil {
			return err
		}
		if err := putIndexes(tx, &r); err != nil {
			return err
		}
		if err := live.Put(oldLiveKey(r.Resource, r.FenceToken, r.Segment), []byte(r.ID)); err != nil {
			return err
		}
		row, _, err := getResource(tx, r.Resource)
		if err != nil {
			return err
		}
		row.LastSegmentSeq, row.PendingReceipt = 1, r.ID
		if err := putResource(tx, &row); err != nil {
			return err
		}
		// Compact gone's first segment (settled, not the last one): the
		// receipt goes, its live entry in byres, which it does not see, stays.
		return tx.Bucket(bReceipts).Delete([]byte(gone.ReceiptID))
	})

	s = openAt(t, path)
	defer s.Close()
	if r, err := s.ReceiptAt(ctx, "res/again", 7, 1); err != nil || r.ID != "rcpt_again2" {
		t.Fatalf("ReceiptAt of the segment the older binary admitted = %+v, %v; want rcpt_again2", r, err)
	}
	if adm, err := s.Admit(ctx, admitReq("res/again", 1, "rcpt_again3")); err != nil || !adm.Replay || adm.Receipt.ID != "rcpt_again2" {
		t.Fatalf("replay of the segment the older binary admitted = %+v, %v; want a replay of rcpt_again2", adm, err)
	}
	if adm, err := s.Admit(ctx, admitReq("res/freed", 1, "rcpt_freed2")); err != nil || adm.Replay || adm.Receipt.ID != "rcpt_freed2" {
		t.Fatalf("retry of the segment the older binary freed = %+v, %v; want rcpt_freed2 accepted", adm, err)
	}
	if r, err := s.ReceiptAt(ctx, "res/gone", 7, 1); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("ReceiptAt of a compacted receipt = %+v, %v; want NOT_FOUND", r, err)
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bLive) != nil {
			t.Error("the older binary's live bucket is still there")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestFileOfANewerLayoutIsRefused: Open refuses a file whose layout is
// newer than this code's (it would run without what that layout moved or
// added) and leaves it as it is.
func TestFileOfANewerLayoutIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := openAt(t, path)
	_ = s.Close()
	olderBinary(t, path, func(tx *bolt.Tx, live *bolt.Bucket) error {
		if err := tx.DeleteBucket(bLive); err != nil {
			return err
		}
		return tx.Bucket(bMeta).Put(keyLayout, u64(layout+1))
	})
	if s, err := Open(path); err == nil {
		_ = s.Close()
		t.Fatalf("Open of a layout %d file succeeded, want a refusal", layout+1)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bMeta).Get(keyLayout); string(v) != string(u64(layout+1)) {
			t.Errorf("layout after the refused Open = %x, want it unchanged", v)
		}
		return nil
	})
}

// TestOlderBinaryOnAJournalACrashLeftIsRefused: a binary of layout 3 or
// older knows no journal; one that ran on a file a crash left with writes in
// it saw stale fence state, so Open refuses the file, and changes nothing.
func TestOlderBinaryOnAJournalACrashLeftIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := openAt(t, path)
	writeSegments(t, s, "res/a", 5, time.UnixMilli(1_700_000_000_000).UTC())
	crash(t, s)
	rewriteFile(t, path, func(tx *bolt.Tx) error { // the older binary's Open
		_, err := tx.CreateBucketIfNotExists(bLive)
		return err
	})
	openIsRefusedLeavingTheJournal(t, path)
}

// TestRepairedFileIsMarkedWithTheJournalsLayout: a layout 4 file that a
// binary of layout 3 or older has used is repaired by Open and marked layout
// 5, so that after a crash with writes in its journal a binary of layout 4
// refuses it and one of layout 3 or older that ran on it is found out: Open
// refuses the file instead of moving the journal over that binary's writes.
func TestRepairedFileIsMarkedWithTheJournalsLayout(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s := openAt(t, path)
	writeSegments(t, s, "res/a", 2, time.UnixMilli(1_700_000_000_000).UTC())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteFile(t, path, func(tx *bolt.Tx) error { // a layout 4 file an older binary has opened
		for _, name := range journaled {
			if err := tx.DeleteBucket(journalOf[string(name)]); err != nil {
				return err
			}
		}
		if _, err := tx.CreateBucket(bLive); err != nil {
			return err
		}
		return tx.Bucket(bMeta).Put(keyLayout, u64(4))
	})
	s = openAt(t, path)
	if _, err := s.Admit(ctx, admitReq("res/a", 3, "rcpt_3")); err != nil {
		t.Fatal(err)
	}
	crash(t, s)
	rewriteFile(t, path, func(tx *bolt.Tx) error {
		if v := tx.Bucket(bMeta).Get(keyLayout); !bytes.Equal(v, u64(layout)) {
			return fmt.Errorf("layout %x after the repair, want %d", v, layout)
		}
		_, err := tx.CreateBucketIfNotExists(bLive) // an older binary's Open
		return err
	})
	openIsRefusedLeavingTheJournal(t, path)
}

// openIsRefusedLeavingTheJournal fails t unless Open refuses the file at
// path (an older binary used it over an unmoved journal, which must hold
// entries) and leaves the file byte for byte as it was: the journal, the big
// trees, the live bucket and the layout.
func openIsRefusedLeavingTheJournal(t *testing.T, path string) {
	t.Helper()
	if journalKeys(t, path) == 0 {
		t.Fatal("setup: the journal is empty")
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path); err == nil {
		_ = s.Close()
		t.Fatal("Open of a file an older binary used over an unmoved journal succeeded")
	}
	if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, before) {
		t.Fatalf("the refused Open changed the file (%v)", err)
	}
}
