package embedded

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/storetest"
)

// TestContractWithTheJournalMovedAfterEveryCommit: the store keeps every
// rule of the contract when the committer moves the journal into the big
// trees after each commit, so that keys are read from the journal, from the
// big trees and from both sides (a key rewritten after a move). TestContract
// (embedded_test.go) runs it with the journal never moved.
func TestContractWithTheJournalMovedAfterEveryCommit(t *testing.T) {
	var stores []*Store
	storetest.Run(t, func(t *testing.T) fencegate.FenceStore {
		s := openTemp(t, WithJournalMoves(1))
		stores = append(stores, s)
		return s
	})
	var merges uint64
	for _, s := range stores {
		merges += s.Stats().Merges
	}
	if merges == 0 {
		t.Fatal("the contract ran without a single move of the journal")
	}
}

// TestWritesAfterAMoveLeaveTheBigTreesAlone: once the journal is moved, an
// admission and its settle (on a resource the big trees hold and on a new
// one) write only journal pages: no big tree gets a new root page, which a
// bbolt commit gives every tree it changes.
func TestWritesAfterAMoveLeaveTheBigTreesAlone(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	writeSegments(t, s, "res/big", 400, now)
	for i := range 150 { // enough resources for a resources tree of its own pages
		writeSegments(t, s, fmt.Sprintf("res/other/%03d", i), 1, now)
	}
	if _, _, _, err := moveJournal(s.db, s.db.Update, moveBudget, 0); err != nil {
		t.Fatal(err)
	}
	roots := func() map[string]uint64 {
		m := map[string]uint64{}
		_ = s.db.View(func(tx *bolt.Tx) error {
			for _, name := range journaled {
				m[string(name)] = uint64(tx.Bucket(name).Root())
			}
			return nil
		})
		return m
	}
	before := roots()
	for _, name := range [][]byte{bReceipts, bByRes, bByOp, bByState, bResources} {
		if before[string(name)] == 0 {
			t.Fatalf("big tree %s is inline: too small to tell", name)
		}
	}
	for i, res := range []string{"res/big", "res/new"} {
		seg := uint64(401)
		if res == "res/new" {
			seg = 1
		}
		req := admitReq(res, seg, fmt.Sprintf("rcpt_after_%d", i))
		req.Now = now.Add(time.Hour)
		adm, err := s.Admit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v2", Now: req.Now}); err != nil {
			t.Fatal(err)
		}
	}
	if after := roots(); !reflect.DeepEqual(after, before) {
		t.Fatalf("big tree roots moved by writes after the move: %v, were %v", after, before)
	}
	row, err := s.Resource(ctx, "res/big")
	if err != nil || row.LastSegmentSeq != 401 {
		t.Fatalf("Resource(res/big) = %+v, %v; want segment 401", row, err)
	}
	p, err := s.ReceiptsByResource(ctx, "res/big", fencegate.Page{Limit: 1000})
	if err != nil || len(p.Receipts) != 401 || p.Receipts[400].ID != "rcpt_after_0" {
		t.Fatalf("ReceiptsByResource(res/big) = %d receipts, %v; want 401, the last rcpt_after_0", len(p.Receipts), err)
	}
}

// writeSegments admits and settles segments 1..n of res, one transaction.
func writeSegments(t *testing.T, s *Store, res string, n int, now time.Time) {
	t.Helper()
	err := s.batch.do(func(tx *bolt.Tx) error {
		for i := range n {
			req := admitReq(res, uint64(i+1), fmt.Sprintf("rcpt_%s_%05d", res, i))
			req.Now = now.Add(time.Duration(i) * time.Millisecond)
			if _, refused, err := admitTx(tx, &req); err != nil || refused != nil {
				return fmt.Errorf("admission %d: %v %v", i, refused, err)
			}
			if _, err := settleTx(tx, req.ReceiptID, &fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v", Now: req.Now}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// crash closes s without moving its journal, as a process that dies does.
func crash(t *testing.T, s *Store) {
	t.Helper()
	s.batch.close()
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
}

// journalKeys counts the entries in the journal buckets of the closed file at path.
func journalKeys(t *testing.T, path string) int {
	t.Helper()
	n := 0
	rewriteFile(t, path, func(tx *bolt.Tx) error {
		for _, name := range journaled {
			if b := tx.Bucket(journalOf[string(name)]); b != nil {
				n += b.Stats().KeyN
			}
		}
		return nil
	})
	return n
}

// TestOpenMovesTheJournalACrashLeftAndCloseMovesItAll: a file a crash left
// with writes in its journal opens with every one of them readable and the
// journal moved; a clean Close leaves the journal empty.
func TestOpenMovesTheJournalACrashLeftAndCloseMovesItAll(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s := openAt(t, path)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	writeSegments(t, s, "res/a", 5, now)
	crash(t, s)
	if n := journalKeys(t, path); n == 0 {
		t.Fatal("the crash left nothing in the journal: nothing to tell")
	}

	s = openAt(t, path)
	err := s.db.View(func(tx *bolt.Tx) error {
		if !journalEmpty(tx) {
			return fmt.Errorf("the journal a crash left is still there after Open")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if row, err := s.Resource(ctx, "res/a"); err != nil || row.LastSegmentSeq != 5 {
		t.Fatalf("Resource after the crash = %+v, %v; want segment 5", row, err)
	}
	if adm, err := s.Admit(ctx, admitReq("res/a", 5, "rcpt_again")); fencegate.ErrorCode(err) == "" && !adm.Replay {
		t.Fatalf("segment 5 again after the crash = %+v, %v; want it refused or replayed", adm, err)
	}
	writeSegments(t, s, "res/b", 3, now)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := journalKeys(t, path); n != 0 {
		t.Fatalf("Close left %d entries in the journal", n)
	}
	s = openAt(t, path)
	defer s.Close()
	if row, err := s.Resource(ctx, "res/b"); err != nil || row.LastSegmentSeq != 3 {
		t.Fatalf("Resource after Close and Open = %+v, %v; want segment 3", row, err)
	}
}

// TestCursorReadsBothSidesInKeyOrder: a journaled tree's cursor returns each
// key once, in key order, with the journal's value for a key on both sides,
// from any seek position; Get and Delete agree with it.
func TestCursorReadsBothSidesInKeyOrder(t *testing.T) {
	s := openTemp(t)
	err := s.db.Update(func(tx *bolt.Tx) error {
		tr := treeOf(tx, bVersions)
		for _, k := range []string{"a", "c", "e", "g"} {
			if err := tr.cold.Put([]byte(k), []byte("cold-"+k)); err != nil {
				return err
			}
		}
		for _, k := range []string{"b", "c", "f", "h"} {
			if err := tr.Put([]byte(k), []byte("hot-"+k)); err != nil {
				return err
			}
		}
		if err := tr.Delete([]byte("e")); err != nil {
			return err
		}
		var got []string
		c := tr.Cursor()
		for k, v := c.Seek(nil); k != nil; k, v = c.Next() {
			got = append(got, string(k)+"="+string(v))
		}
		want := []string{"a=cold-a", "b=hot-b", "c=hot-c", "f=hot-f", "g=cold-g", "h=hot-h"}
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("cursor from the start: %v, want %v", got, want)
		}
		for seek, first := range map[string]string{"c": "c", "d": "f", "ca": "f", "g": "g", "i": ""} {
			if k, _ := tr.Cursor().Seek([]byte(seek)); string(k) != first {
				return fmt.Errorf("Seek(%q) = %q, want %q", seek, k, first)
			}
		}
		if v := tr.Get([]byte("c")); !bytes.Equal(v, []byte("hot-c")) {
			return fmt.Errorf("Get(c) = %q, want the journal's", v)
		}
		if v := tr.Get([]byte("e")); v != nil {
			return fmt.Errorf("Get of a deleted key = %q", v)
		}
		if err := tr.Delete([]byte("c")); err != nil {
			return err
		}
		if v := tr.Get([]byte("c")); v != nil {
			return fmt.Errorf("Get(c) after Delete = %q: a side kept it", v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestJournalMovedInPartsReadsTheSame: a move bounded by its budget moves
// part of the journal per transaction; after each part every read answers
// as before, and the parts end with the journal empty.
func TestJournalMovedInPartsReadsTheSame(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	writeSegments(t, s, "res/a", 30, now)
	writeSegments(t, s, "res/b", 20, now)
	if _, err := s.Admit(ctx, admitReq("res/b", 21, "rcpt_b21")); err != nil { // PENDING, live
		t.Fatal(err)
	}
	read := func() string {
		var out []string
		for _, res := range []string{"res/a", "res/b"} {
			row, err := s.Resource(ctx, res)
			out = append(out, fmt.Sprintf("%+v %v", row, err))
			p, err := s.ReceiptsByResource(ctx, res, fencegate.Page{Limit: 1000})
			out = append(out, fmt.Sprintf("%d %v", len(p.Receipts), err))
			for _, r := range p.Receipts {
				out = append(out, r.ID+" "+string(r.State))
			}
		}
		p, err := s.ReceiptsByState(ctx, fencegate.ReceiptPending, fencegate.Page{})
		out = append(out, fmt.Sprintf("pending %d %v", len(p.Receipts), err))
		r, err := s.ReceiptAt(ctx, "res/b", 7, 21)
		out = append(out, fmt.Sprintf("live %s %v", r.ID, err))
		v, err := s.Version(ctx, "objects/res/a")
		return strings.Join(append(out, v, fmt.Sprint(err)), "\n")
	}
	want := read()
	parts := 0
	for empty := false; !empty; parts++ {
		err := s.db.Update(func(tx *bolt.Tx) error {
			var err error
			_, empty, err = mergeJournal(tx, 2000)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := read(); got != want {
			t.Fatalf("after part %d of the move:\n%s\nwant\n%s", parts+1, got, want)
		}
	}
	if parts < 3 {
		t.Fatalf("the move took %d parts: the budget did not bound it", parts)
	}
	_ = s.db.View(func(tx *bolt.Tx) error {
		if !journalEmpty(tx) {
			t.Error("the journal is not empty after the last part")
		}
		return nil
	})
}

// TestCloseTwiceIsNoError: a second Close of a Store does nothing.
func TestCloseTwiceIsNoError(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "fence.db"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestJournalMatchesAModelAcrossPartialMoves: random puts, deletes and
// moves of random budgets on two journaled trees, so that keys sit in the
// journal, in the big tree or on both sides (rewritten after a move), agree
// with a plain map after every step: each Get, the cursor's walk, and the
// journal never holding a value older than the model's.
func TestJournalMatchesAModelAcrossPartialMoves(t *testing.T) {
	s := openTemp(t)
	rng := rand.New(rand.NewPCG(7, 11))
	names := [][]byte{bResources, bVersions}
	model := map[string]map[string]string{}
	for _, n := range names {
		model[string(n)] = map[string]string{}
	}
	for step := range 3000 {
		err := s.db.Update(func(tx *bolt.Tx) error {
			name := names[rng.IntN(len(names))]
			tr, m := treeOf(tx, name), model[string(name)]
			key := fmt.Sprintf("k%02d", rng.IntN(30))
			switch op := rng.IntN(10); {
			case op < 5:
				v := fmt.Sprintf("v%d", step)
				m[key] = v
				return tr.Put([]byte(key), []byte(v))
			case op < 8:
				delete(m, key)
				return tr.Delete([]byte(key))
			default:
				_, _, err := mergeJournal(tx, rng.IntN(200))
				return err
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		err = s.db.View(func(tx *bolt.Tx) error {
			for _, name := range names {
				tr, m := treeOf(tx, name), model[string(name)]
				var walked []string
				c := tr.Cursor()
				for k, v := c.Seek(nil); k != nil; k, v = c.Next() {
					walked = append(walked, string(k)+"="+string(v))
					if hv := tr.hot.Get(k); hv != nil && string(hv) != m[string(k)] {
						return fmt.Errorf("%s: the journal holds %s=%s, the model %q", name, k, hv, m[string(k)])
					}
				}
				var want []string
				for k, v := range m {
					want = append(want, k+"="+v)
				}
				slices.Sort(want)
				if !slices.Equal(walked, want) {
					return fmt.Errorf("%s: walk %v, model %v", name, walked, want)
				}
				for i := range 30 {
					k := fmt.Sprintf("k%02d", i)
					if got, want := tr.Get([]byte(k)), m[k]; string(got) != want || (got == nil) != (want == "") {
						return fmt.Errorf("%s: Get(%s) = %q, model %q", name, k, got, want)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("after step %d: %v", step, err)
		}
	}
	if _, _, _, err := moveJournal(s.db, s.db.Update, moveBudget, 0); err != nil {
		t.Fatal(err)
	}
	_ = s.db.View(func(tx *bolt.Tx) error {
		if !journalEmpty(tx) {
			t.Error("the journal is not empty after moveJournal")
		}
		return nil
	})
}
