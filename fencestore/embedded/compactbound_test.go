package embedded

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// compactFixture writes kept receipts (each its resource's last segment,
// never compactable) interleaved in time with compactable ones (all but
// the last segment of res/many), all settled, and returns the IDs of each
// and a cutoff after them all.
func compactFixture(t *testing.T, s *Store, kept, gone int) (keptIDs, goneIDs []string, cutoff time.Time) {
	t.Helper()
	w := newSettledWrites(t, s)
	write := w.write
	for i := 0; i < kept || i <= gone; i++ {
		if i < kept {
			id := fmt.Sprintf("k%d", i)
			write(fmt.Sprintf("res/k%d", i), 1, id)
			keptIDs = append(keptIDs, id)
		}
		if i <= gone {
			id := fmt.Sprintf("g%d", i)
			write("res/many", uint64(i+1), id)
			if i < gone {
				goneIDs = append(goneIDs, id)
			} else {
				keptIDs = append(keptIDs, id) // res/many's last segment
			}
		}
	}
	return keptIDs, goneIDs, w.at.Add(time.Hour)
}

// settledWrites admits and settles COMMITTED one write after another, each
// a millisecond after the last.
type settledWrites struct {
	t  *testing.T
	s  *Store
	at time.Time
}

func newSettledWrites(t *testing.T, s *Store) *settledWrites {
	return &settledWrites{t: t, s: s, at: time.UnixMilli(1_700_000_000_000).UTC()}
}

// write admits segment seg of res as receipt id and settles it.
func (w *settledWrites) write(res string, seg uint64, id string) {
	w.t.Helper()
	ctx := context.Background()
	req := admitReq(res, seg, id)
	req.Now = w.at
	w.at = w.at.Add(time.Millisecond)
	if _, err := w.s.Admit(ctx, req); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.s.Settle(ctx, id, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v" + id, Now: w.at}); err != nil {
		w.t.Fatal(err)
	}
}

// checkCompacted asserts that every receipt of gone is gone and every one of
// kept is still there.
func checkCompacted(t *testing.T, s *Store, kept, gone []string) {
	t.Helper()
	for _, id := range gone {
		if _, err := s.Receipt(context.Background(), id); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
			t.Fatalf("compactable receipt %s after compaction: %v, want NOT_FOUND", id, err)
		}
	}
	for _, id := range kept {
		if _, err := s.Receipt(context.Background(), id); err != nil {
			t.Fatalf("kept receipt %s after compaction: %v", id, err)
		}
	}
}

// Rule: one compaction holds the writer for a bounded amount of work: each
// of its write transactions examines at most compactExamine index entries,
// and a call goes on in further transactions (each queued behind the writes
// that arrived meanwhile) until it has walked every settled receipt up to
// the cutoff, so one call still deletes every compactable receipt, keeps
// every kept one and examines each once.
func TestACompactionCallExaminesAtMostTheBoundPerTransaction(t *testing.T) {
	defer func(old int) { compactExamine = old }(compactExamine)
	compactExamine = 16
	s := openTemp(t)
	kept, gone, cutoff := compactFixture(t, s, 50, 40)
	before := s.Stats().Commits
	n, err := s.CompactReceipts(context.Background(), cutoff, 1000)
	if err != nil || n != len(gone) {
		t.Fatalf("one call compacted %d, %v; want all %d compactable receipts", n, err, len(gone))
	}
	scanned, steps := s.compactScanned.Load(), s.Stats().Commits-before // each step is one write transaction
	if want := uint64(len(kept) + len(gone)); scanned != want {
		t.Fatalf("the call examined %d index entries, want each of the %d receipts once", scanned, want)
	}
	if min := (scanned + uint64(compactExamine) - 1) / uint64(compactExamine); steps < min {
		t.Fatalf("the call examined %d entries in %d transactions: more than %d in one", scanned, steps, compactExamine)
	}
	checkCompacted(t, s, kept, gone)
}

// Rule: calls whose limit is smaller than what there is to delete, each
// examining at most the bound per transaction, reach every compactable
// receipt over a sweep (the retention worker's: until a call deletes fewer
// than its limit) and keep every kept one.
func TestRepeatedBoundedCompactionCallsReachEveryCompactableReceipt(t *testing.T) {
	defer func(old int) { compactExamine = old }(compactExamine)
	compactExamine = 16
	s := openTemp(t)
	kept, gone, cutoff := compactFixture(t, s, 50, 40)
	total, calls := 0, 0
	for {
		n, err := s.CompactReceipts(context.Background(), cutoff, 7)
		if err != nil {
			t.Fatal(err)
		}
		total, calls = total+n, calls+1
		if n < 7 {
			break
		}
		if calls > len(kept)+len(gone) {
			t.Fatalf("%d calls and still deleting", calls)
		}
	}
	if total != len(gone) {
		t.Fatalf("the sweep of %d calls compacted %d receipts, want %d", calls, total, len(gone))
	}
	checkCompacted(t, s, kept, gone)
	if scanned := s.compactScanned.Load(); scanned > uint64(len(kept)+len(gone)) {
		t.Fatalf("the sweep examined %d entries for %d receipts: some twice", scanned, len(kept)+len(gone))
	}
}

// quarantineSegments writes receipts q1..qN, segments 1..n of res/q, and
// for each segment of quarantined a quarantine record naming its receipt,
// refused payloads another for each of records, keeping a 64 KiB payload.
// It returns the cutoff after them all.
func quarantineSegments(t *testing.T, s *Store, n, records int, quarantined ...uint64) time.Time {
	t.Helper()
	w := newSettledWrites(t, s)
	for i := 1; i <= n; i++ {
		w.write("res/q", uint64(i), fmt.Sprintf("q%d", i))
	}
	payload := bytes.Repeat([]byte("x"), 64<<10)
	for _, seg := range quarantined {
		for j := range records {
			req := admitReq("res/q", seg, fmt.Sprintf("qq%d-%d", seg, j))
			req.PayloadDigest = fmt.Sprintf("sha256:other%d", j)
			req.QuarantinePayload = func() ([]byte, error) { return payload, nil }
			req.Now = w.at
			if _, err := s.Admit(context.Background(), req); fencegate.ErrorCode(err) != fencegate.CodeQuarantined {
				t.Fatalf("segment %d with another payload: %v, want QUARANTINED", seg, err)
			}
		}
	}
	return w.at.Add(time.Hour)
}

// Rule: compaction holds the writer for bounded work however many
// quarantine records (each keeping up to 1 MiB of refused payload) a
// resource has: whether a record names a receipt is one lookup in the
// quarantine index, made only for a receipt the rules would otherwise
// delete, and no record is read. A step used to decode every record of the
// receipt's resource, payload and all, for every receipt it examined (300
// receipts and 50 records of 64 KiB held the writer for 13.8 s). The
// receipts the records name are still kept.
func TestACompactionStepDecodesNoQuarantineRecord(t *testing.T) {
	s := openTemp(t)
	cutoff := quarantineSegments(t, s, 40, 5, 10, 40)
	decoded := 0
	onQuarantineDecode = func() { decoded++ }
	defer func() { onQuarantineDecode = nil }()
	n, err := s.CompactReceipts(context.Background(), cutoff, 1000)
	if err != nil || n != 38 {
		t.Fatalf("compacted %d, %v; want the 38 receipts no record names but the last segment's", n, err)
	}
	if decoded != 0 {
		t.Fatalf("compaction of 40 receipts decoded %d quarantine records, want none", decoded)
	}
	var gone []string
	for i := 1; i < 40; i++ {
		if i != 10 {
			gone = append(gone, fmt.Sprintf("q%d", i))
		}
	}
	checkCompacted(t, s, []string{"q10", "q40"}, gone)
}

// Rule: compaction looks in the quarantine index only for a receipt the
// other rules would delete (a record naming a receipt only keeps it), not
// for every receipt it examines; the receipt a record names is still kept.
func TestCompactionLooksUpTheQuarantineIndexOnlyForReceiptsItWouldDelete(t *testing.T) {
	s := openTemp(t)
	kept, gone, cutoff := compactFixture(t, s, 50, 40)
	req := admitReq("res/many", 5, "qq5") // a record naming g4, segment 5 of res/many
	req.PayloadDigest = "sha256:other"
	req.QuarantinePayload = func() ([]byte, error) { return []byte("refused"), nil }
	req.Now = cutoff.Add(-time.Minute)
	if _, err := s.Admit(context.Background(), req); fencegate.ErrorCode(err) != fencegate.CodeQuarantined {
		t.Fatalf("segment 5 with another payload: %v, want QUARANTINED", err)
	}
	lookups := 0
	onQuarantineLookup = func() { lookups++ }
	defer func() { onQuarantineLookup = nil }()
	n, err := s.CompactReceipts(context.Background(), cutoff, 1000)
	if err != nil || n != len(gone)-1 {
		t.Fatalf("compacted %d, %v; want the %d receipts no record names", n, err, len(gone)-1)
	}
	if lookups != len(gone) {
		t.Fatalf("compaction of %d receipts looked in the quarantine index %d times, want %d (once per receipt it would delete)",
			len(kept)+len(gone), lookups, len(gone))
	}
	checkCompacted(t, s, append(kept, "g4"), slices.DeleteFunc(gone, func(id string) bool { return id == "g4" }))
}

// Rule: a receipt a quarantine record names is kept by compaction in a
// file whose quarantine index lacks the record: one written before the
// index, or by a binary without it (a rollback) that added the record.
// Open rebuilds the index when it does not count one entry per record.
func TestOpenRebuildsAQuarantineIndexMissingARecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := openAt(t, path)
	cutoff := quarantineSegments(t, s, 30, 1, 10, 20)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteFile(t, path, func(tx *bolt.Tx) error { // the record naming q20 was written without its entry
		c := tx.Bucket(bQReceipts).Cursor()
		k, _ := c.Seek(join([]byte("q20")))
		if !bytes.HasPrefix(k, join([]byte("q20"))) {
			return fmt.Errorf("no index entry for q20")
		}
		return c.Delete()
	})
	s = openAt(t, path)
	defer s.Close()
	n, err := s.CompactReceipts(context.Background(), cutoff, 1000)
	if err != nil || n != 27 {
		t.Fatalf("compacted %d, %v; want the 27 receipts no record names but the last segment's", n, err)
	}
	checkCompacted(t, s, []string{"q10", "q20", "q30"}, []string{"q1", "q19", "q21", "q29"})
}
