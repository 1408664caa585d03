package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// TestAdmissionIndexEntriesAreNeighbours: the by-resource entry and the live
// entry an admission adds are adjacent keys of byres (so they share a leaf
// page), on every resource, after any number of earlier segments.
func TestAdmissionIndexEntriesAreNeighbours(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	for i := range 60 {
		req := admitReq(fmt.Sprintf("res/%d", i%3), uint64(i/3+1), fmt.Sprintf("rcpt_%03d", i))
		req.Now = now.Add(time.Duration(i) * time.Millisecond)
		adm, err := s.Admit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		err = s.db.View(func(tx *bolt.Tx) error {
			r := &adm.Receipt
			c := treeOf(tx, bByRes).Cursor()
			k, _ := c.Seek(join([]byte(r.Resource), timeKey(r.CreatedAt), []byte(r.ID)))
			if k == nil {
				return fmt.Errorf("no by-resource entry for %s", r.ID)
			}
			next, id := c.Next()
			if !bytes.Equal(next, liveKey(r.Resource, r.FenceToken, r.Segment)) || string(id) != r.ID {
				return fmt.Errorf("the key after %s's by-resource entry is %q -> %q, want its live entry", r.ID, next, id)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v", Now: req.Now}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLayoutThreeFileMovesItsLiveIndexIntoByres: a file of layout 3 (live
// receipts indexed in a bucket of their own) is upgraded when opened: every
// live receipt is found by its fence and segment again, a replay of one is a
// replay, a NOT_APPLIED receipt stays out of the index, the old bucket is
// gone and the file is marked with this code's layout.
func TestLayoutThreeFileMovesItsLiveIndexIntoByres(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_700_000_000_000).UTC()
	var reqs []fencegate.AdmitRequest
	for i, o := range []fencegate.ReceiptState{fencegate.ReceiptCommitted, fencegate.ReceiptCommitted, "", fencegate.ReceiptNotApplied} {
		req := admitReq("res/"+fmt.Sprint(i%2), uint64(i/2+1), fmt.Sprintf("rcpt_%d", i))
		req.Now = now.Add(time.Duration(i) * time.Millisecond)
		if _, err := s.Admit(ctx, req); err != nil {
			t.Fatal(err)
		}
		if o != "" {
			if _, err := s.Settle(ctx, req.ReceiptID, fencegate.Outcome{State: o, Version: "v", Now: req.Now}); err != nil {
				t.Fatal(err)
			}
		}
		reqs = append(reqs, req)
	}
	_ = s.Close()

	// Turn the file back into layout 3: the live entries in their own bucket.
	rewriteFile(t, path, func(tx *bolt.Tx) error {
		live, err := tx.CreateBucket(bLive)
		if err != nil {
			return err
		}
		byres := tx.Bucket(bByRes)
		var moved [][]byte
		err = byres.ForEach(func(k, v []byte) error {
			if res, fence, seg, ok := splitLiveKey(k); ok {
				moved = append(moved, bytes.Clone(k))
				return live.Put(oldLiveKey(string(res), fence, seg), bytes.Clone(v))
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(moved) != 3 {
			return fmt.Errorf("%d live entries before the downgrade, want 3 (the NOT_APPLIED one is not live)", len(moved))
		}
		for _, k := range moved {
			if err := byres.Delete(k); err != nil {
				return err
			}
		}
		return tx.Bucket(bMeta).Put(keyLayout, u64(3))
	})

	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, req := range reqs {
		r, err := s.ReceiptAt(ctx, req.Grant.Resource, req.Grant.FenceToken, req.Segment)
		if i == 3 {
			if fencegate.ErrorCode(err) != fencegate.CodeNotFound {
				t.Fatalf("ReceiptAt of the NOT_APPLIED segment = %+v, %v; want NOT_FOUND", r, err)
			}
			continue
		}
		if err != nil || r.ID != req.ReceiptID {
			t.Fatalf("ReceiptAt(%s, %d) after the upgrade = %+v, %v; want %s", req.Grant.Resource, req.Segment, r, err, req.ReceiptID)
		}
		if adm, err := s.Admit(ctx, req); err != nil || !adm.Replay || adm.Receipt.ID != req.ReceiptID {
			t.Fatalf("replay of %s after the upgrade = %+v, %v", req.ReceiptID, adm, err)
		}
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bLive) != nil {
			return fmt.Errorf("the layout 3 live bucket is still there")
		}
		if v := tx.Bucket(bMeta).Get(keyLayout); binary.BigEndian.Uint64(v) != layout {
			return fmt.Errorf("layout %x after the upgrade, want %d", v, layout)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSplitLiveKeyReadsOnlyLiveKeys: splitLiveKey gives back the parts
// liveKey joined, and refuses a resource's by-resource key (which repairLive
// must never take for a live entry), whatever bytes its time holds.
func TestSplitLiveKeyReadsOnlyLiveKeys(t *testing.T) {
	for _, c := range []struct {
		res          string
		fence, segmt uint64
	}{{"res/a", 1, 1}, {"r", 0, ^uint64(0)}, {"a/b/c", 1 << 40, 7}} {
		res, fence, seg, ok := splitLiveKey(liveKey(c.res, c.fence, c.segmt))
		if !ok || string(res) != c.res || fence != c.fence || seg != c.segmt {
			t.Fatalf("splitLiveKey(liveKey(%q, %d, %d)) = %q, %d, %d, %v", c.res, c.fence, c.segmt, res, fence, seg, ok)
		}
	}
	at := time.Unix(1, 0x01_01_01_01).UTC()                 // 0x01 bytes in the time key
	for _, id := range []string{"rcpt_1", "rcpt_1234567"} { // the second makes the key as long as a live key from its first 0x01
		k := join([]byte("res/a"), timeKey(at), []byte(id))
		if _, _, _, ok := splitLiveKey(k); ok {
			t.Fatalf("splitLiveKey(%q) took a by-resource key for a live one", k)
		}
	}
}
