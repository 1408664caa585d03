package embedded

import (
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// TestAppendIndexesAreSplitFull: the indexes whose keys only grow within
// their prefix (appendBuckets) fill their leaf pages instead of leaving them
// half empty at each split, so a receipt costs the file less.
func TestAppendIndexesAreSplitFull(t *testing.T) {
	s := openTemp(t)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	// One batched transaction of many admitted and settled segments on a few resources.
	err := s.batch.do(func(tx *bolt.Tx) error {
		for i := range 3000 {
			req := admitReq(fmt.Sprintf("res/%d", i%4), uint64(i/4+1), fmt.Sprintf("rcpt_%05d", i))
			req.Now = now.Add(time.Duration(i) * time.Millisecond)
			if _, refused, err := admitTx(tx, &req); err != nil || refused != nil {
				return fmt.Errorf("admission %d: %v %v", i, refused, err)
			}
			if _, err := settleTx(tx, req.ReceiptID, &fencegate.Outcome{State: fencegate.ReceiptCommitted, Now: req.Now}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The admissions are in the journal; then in the big trees, once moved.
	checkFill(t, s, func(name []byte) []byte { return journalOf[string(name)] })
	if _, _, _, err := moveJournal(s.db, s.db.Update, moveBudget, 0); err != nil {
		t.Fatal(err)
	}
	checkFill(t, s, func(name []byte) []byte { return name })
}

// checkFill fails t unless the buckets bucket(name) of appendBuckets have
// their leaf pages at least 85 % full.
func checkFill(t *testing.T, s *Store, bucket func(name []byte) []byte) {
	t.Helper()
	err := s.db.View(func(tx *bolt.Tx) error {
		for _, n := range appendBuckets {
			name := bucket(n)
			st := tx.Bucket(name).Stats()
			if st.LeafPageN < 4 {
				return fmt.Errorf("bucket %s has %d leaf pages: too few to tell", name, st.LeafPageN)
			}
			if fill := float64(st.LeafInuse) / float64(st.LeafAlloc); fill < 0.85 {
				return fmt.Errorf("bucket %s: leaves %.0f%% full (%d pages), want them split full", name, 100*fill, st.LeafPageN)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
