package embedded

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// The quarantine index (bucket qreceipts) answers "does a quarantine record
// name this receipt" for CompactReceipts, which asks it of every receipt it
// could delete inside the batched write transaction: without it, that took
// a walk over the resource's records decoding each one whole, its kept
// payload (up to 1 MiB) too, for each receipt examined; with 300 receipts
// and 50 records of 64 KiB on one resource, one step held the writer for
// 13.8 s. Its keys are receipt ID 0 quarantine key, one per record (the
// record's own key makes them distinct where several records name one
// receipt), written with the record in its transaction and deleted with it
// (CompactQuarantine, qretain.go), after which the receipt is no longer kept
// for it.
//
// The index is not part of the layout: Open rebuilds it, and the
// last-attempt index (qretain.go), whenever either does not hold as many
// entries as there are records, which is so in a file written before it
// and in one where a binary without it (a rollback) has added records; a
// binary without it leaves the bucket as it is.

var bQReceipts = []byte("qreceipts")

// onQuarantineDecode, if set (tests), is called for each quarantine record
// decoded whole (payload included).
var onQuarantineDecode func()

// encodeQuarantine is q as a quarantine record is stored: its JSON (see
// codec.go on records that name a delegate).
func encodeQuarantine(q *fencegate.Quarantine) ([]byte, error) { return json.Marshal(q) }

// decodeQuarantine decodes a whole quarantine record.
func decodeQuarantine(v []byte, q *fencegate.Quarantine) error {
	if f := onQuarantineDecode; f != nil {
		f()
	}
	return json.Unmarshal(v, q)
}

// qreceiptKey is the index key of the record at quarantine key qkey naming
// receipt id.
func qreceiptKey(id string, qkey []byte) []byte {
	return join([]byte(id), qkey)
}

// indexQuarantine adds the entry of the record at qkey naming receipt id,
// unless it is there (a repeat of the request rewrites its record in place).
func indexQuarantine(tx *bolt.Tx, id string, qkey []byte) error {
	b, k := tx.Bucket(bQReceipts), qreceiptKey(id, qkey)
	if b.Get(k) != nil {
		return nil
	}
	return b.Put(k, []byte{})
}

// onQuarantineLookup, if set (tests), is called for each quarantineNames.
var onQuarantineLookup func()

// quarantineNames reports whether a quarantine record names receipt id: one
// seek in the index, no record read.
func quarantineNames(tx *bolt.Tx, id string) bool {
	if f := onQuarantineLookup; f != nil {
		f()
	}
	prefix := join([]byte(id))
	k, _ := tx.Bucket(bQReceipts).Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// repairQuarantineIndex rebuilds this index and the last-attempt index if
// either does not hold one entry per quarantine record (see above);
// counting reads the buckets' pages, not the records. A rebuild decodes
// each record's ID, receipt ID and last attempt only.
func repairQuarantineIndex(tx *bolt.Tx) error {
	records := tx.Bucket(bQuarantine).Stats().KeyN
	if tx.Bucket(bQReceipts).Stats().KeyN == records && tx.Bucket(bQLast).Stats().KeyN == records {
		return nil
	}
	for _, name := range [][]byte{bQReceipts, bQLast} {
		if err := tx.DeleteBucket(name); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(name); err != nil {
			return err
		}
	}
	return tx.Bucket(bQuarantine).ForEach(func(k, v []byte) error {
		var q fencegate.Quarantine
		var named struct {
			ID        string    `json:"quarantineId"`
			ReceiptID string    `json:"receiptId"`
			LastAt    time.Time `json:"lastAt"`
		}
		if err := json.Unmarshal(v, &named); err != nil {
			return fmt.Errorf("decode quarantine record: %w", err)
		}
		q.ID, q.ReceiptID, q.LastAt = named.ID, named.ReceiptID, named.LastAt
		if err := indexQuarantine(tx, q.ReceiptID, k); err != nil {
			return err
		}
		return indexLast(tx, &q, k)
	})
}
