package embedded

import (
	"bytes"
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// The last-attempt index (bucket qlast) orders quarantine records by their
// last attempt, for CompactQuarantine: its keys are timeKey(LastAt)
// followed by the record's quarantine key, its values quarantine ID 0
// receipt ID, so that a record is deleted with all its entries (qids,
// qreceipts, qlast) without being read: a record keeps up to 1 MiB of
// payload, and decoding 1,024 of them would hold the writer for seconds. A
// repeat of the refused request moves the record's entry to its new last
// attempt in the same transaction (putQuarantine).
//
// Like qreceipts, the index is outside the layout: Open rebuilds both
// whenever either does not hold one entry per record (repairQuarantineIndex).
// A binary without it (a rollback) that counts a repeat on a record leaves
// the record's entry at the attempt before; that record is then deleted
// the retention age after that attempt, not after its last one.

var bQLast = []byte("qlast")

// timeKeyLen is the length of a timeKey.
const timeKeyLen = 12

// qlastKey is the last-attempt index key of the record at quarantine key
// qkey, last attempted at last.
func qlastKey(last time.Time, qkey []byte) []byte {
	return append(timeKey(last), qkey...)
}

// indexLast adds the last-attempt entry of q, stored at qkey.
func indexLast(tx *bolt.Tx, q *fencegate.Quarantine, qkey []byte) error {
	return tx.Bucket(bQLast).Put(qlastKey(q.LastAt, qkey), join([]byte(q.ID), []byte(q.ReceiptID)))
}

// unindexLast removes the last-attempt entry of q, stored at qkey (before a
// repeat moves its LastAt).
func unindexLast(tx *bolt.Tx, q *fencegate.Quarantine, qkey []byte) error {
	return tx.Bucket(bQLast).Delete(qlastKey(q.LastAt, qkey))
}

// quarantineExamine bounds the last-attempt entries one transaction of
// CompactQuarantine examines (a variable for tests), as compactExamine does
// for CompactReceipts: the step runs in a batched write transaction that
// admissions queued meanwhile wait for.
var quarantineExamine = 1024

// CompactQuarantine implements fencegate.Compactor in steps, each one write
// op that walks the last-attempt index from its start (the oldest last
// attempt) and deletes at most quarantineExamine records, with their
// payload and their qids, qreceipts and qlast entries, stopping at the first
// entry at or after `before`. Every entry a step examines before that is
// deleted, so no position is kept between steps or calls. A step that
// stops at the bound is followed by another (compactSteps), queued behind
// the writes that arrived meanwhile, until limit records are deleted or
// none is left before `before`. It returns the records deleted, also with
// an error (by the steps committed before it).
func (s *Store) CompactQuarantine(ctx context.Context, before time.Time, limit int) (int, error) {
	return compactSteps(ctx, limit, func(limit int) (int, bool, error) {
		return s.compactQuarantineStep(before, min(limit, quarantineExamine))
	})
}

// compactQuarantineStep deletes up to limit records last attempted before
// `before`, oldest first, in one write op; more reports that it stopped at
// limit with the index not yet walked to `before`.
func (s *Store) compactQuarantineStep(before time.Time, limit int) (deleted int, more bool, err error) {
	end := timeKey(before)
	err = s.batch.do(func(tx *bolt.Tx) error {
		deleted, more = 0, false // the op may run again
		c := tx.Bucket(bQLast).Cursor()
		for k, v := c.First(); k != nil; k, v = c.First() {
			if bytes.Compare(k, end) >= 0 { // last attempt at or after `before`
				return nil
			}
			if deleted == limit {
				more = true
				return nil
			}
			if err := deleteQuarantine(tx, k, v); err != nil {
				return err
			}
			deleted++
		}
		return nil
	})
	if err != nil {
		return 0, false, storeErr(err, "compact quarantine")
	}
	return deleted, more, nil
}

// deleteQuarantine deletes the record of last-attempt entry k (value v)
// with its payload and its qids, qreceipts and qlast entries, reading
// nothing of the record.
func deleteQuarantine(tx *bolt.Tx, k, v []byte) error {
	i := bytes.IndexByte(v, 0)
	if len(k) <= timeKeyLen || i < 0 {
		return fmt.Errorf("malformed quarantine last-attempt entry %q", v)
	}
	qkey := bytes.Clone(k[timeKeyLen:])
	id, receiptID := string(v[:i]), string(v[i+1:])
	if err := tx.Bucket(bQLast).Delete(bytes.Clone(k)); err != nil {
		return err
	}
	if err := tx.Bucket(bQuarantine).Delete(qkey); err != nil {
		return err
	}
	if qids := tx.Bucket(bQIDs); bytes.Equal(qids.Get([]byte(id)), qkey) {
		if err := qids.Delete([]byte(id)); err != nil {
			return err
		}
	}
	return tx.Bucket(bQReceipts).Delete(qreceiptKey(receiptID, qkey))
}
