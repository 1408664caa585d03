package embedded

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// quarantineEntries counts the quarantine records and the entries of each of
// their indexes.
func quarantineEntries(t *testing.T, s *Store) map[string]int {
	t.Helper()
	got := map[string]int{}
	err := s.db.View(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bQuarantine, bQIDs, bQReceipts, bQLast} {
			got[string(b)] = tx.Bucket(b).Stats().KeyN
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// wantQuarantineEntries requires n records and n entries in each index.
func wantQuarantineEntries(t *testing.T, s *Store, n int) {
	t.Helper()
	for b, got := range quarantineEntries(t, s) {
		if got != n {
			t.Fatalf("bucket %s holds %d entries, want %d (%v)", b, got, n, quarantineEntries(t, s))
		}
	}
}

// Rule: a quarantine compaction deletes each record with its payload and
// its qids, qreceipts and qlast entries without reading it (a record keeps
// up to 1 MiB), in write transactions of at most quarantineExamine records
// each, and one call still deletes every record up to the cutoff. The
// receipts the records named are compactable afterwards.
func TestAQuarantineCompactionReadsNoRecordAndIsBoundedPerTransaction(t *testing.T) {
	defer func(old int) { quarantineExamine = old }(quarantineExamine)
	quarantineExamine = 4
	s := openTemp(t)
	cutoff := quarantineSegments(t, s, 10, 5, 2, 3, 4)
	wantQuarantineEntries(t, s, 15)
	if n, err := s.CompactReceipts(context.Background(), cutoff, 1000); err != nil || n != 6 {
		t.Fatalf("receipt compaction with the records = %d, %v; want the 6 no record names", n, err)
	}
	decoded := 0
	onQuarantineDecode = func() { decoded++ }
	defer func() { onQuarantineDecode = nil }()
	before := s.Stats().Commits
	n, err := s.CompactQuarantine(context.Background(), cutoff, 1000)
	if err != nil || n != 15 {
		t.Fatalf("CompactQuarantine = %d, %v; want all 15 records", n, err)
	}
	if decoded != 0 {
		t.Fatalf("the quarantine compaction decoded %d records, want none", decoded)
	}
	if steps := s.Stats().Commits - before; steps < 4 {
		t.Fatalf("15 records deleted in %d transactions: more than %d in one", steps, quarantineExamine)
	}
	wantQuarantineEntries(t, s, 0)
	if n, err := s.CompactReceipts(context.Background(), cutoff, 1000); err != nil || n != 3 {
		t.Fatalf("receipt compaction after the quarantine one = %d, %v; want q2, q3, q4", n, err)
	}
	checkCompacted(t, s, []string{"q10"}, []string{"q1", "q2", "q3", "q4", "q9"})
}

// Rule: a file whose last-attempt index lacks a record's entry (written
// before the index, or a record a binary without it added) has it rebuilt
// by Open, so the quarantine compaction deletes that record too.
func TestOpenRebuildsALastAttemptIndexMissingARecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s := openAt(t, path)
	cutoff := quarantineSegments(t, s, 30, 2, 10, 20)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rewriteFile(t, path, func(tx *bolt.Tx) error {
		c := tx.Bucket(bQLast).Cursor()
		if k, _ := c.First(); k == nil {
			return fmt.Errorf("empty last-attempt index")
		}
		return c.Delete()
	})
	s = openAt(t, path)
	defer s.Close()
	wantQuarantineEntries(t, s, 4)
	if n, err := s.CompactQuarantine(context.Background(), cutoff, 1000); err != nil || n != 4 {
		t.Fatalf("CompactQuarantine = %d, %v; want all 4 records", n, err)
	}
	wantQuarantineEntries(t, s, 0)
}
