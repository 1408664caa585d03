package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

// layout is the bucket layout this code writes (see the package doc).
const layout = 5

var (
	bMeta     = []byte("meta")
	keyLayout = []byte("layout")
)

// upgrade brings a file of an older layout to the current one, in Open's
// transaction: layout 1 lacked the byres index, which is built from receipts;
// layout 2 kept a quarantine record per attempt, which are merged and re-keyed;
// layout 3 kept the live index in a bucket of its own, moved into byres;
// layout 4 had no journal (Open makes its buckets).
func upgrade(tx *bolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bMeta)
	if err != nil {
		return err
	}
	have := uint64(1)
	if v := meta.Get(keyLayout); len(v) == 8 {
		have = binary.BigEndian.Uint64(v)
	}
	if have > layout {
		return fmt.Errorf("the file has layout %d, newer than this binary's %d: open it with the binary that wrote it", have, layout)
	}
	if tx.Bucket(bLive) != nil && !journalEmpty(tx) {
		// A binary of layout 3 or older has run on a file whose journal a
		// crash left unmoved: it read and wrote the big trees without the
		// journal's newer entries, so neither side can be trusted alone.
		// (Open makes the journal empty in a file older than layout 5.)
		return errors.New("an older binary (layout 3 or older) has used this file while its journal held writes it cannot see: its fence state cannot be trusted and is not repaired here (README, Known limitations: rolling the embedded store's binary back)")
	}
	if have >= 4 && tx.Bucket(bLive) != nil {
		// Only a binary of layout 3 or older makes a live bucket in a file
		// of layout 4 or newer (it opened newer layouts as its own): it
		// kept its live index there and could not drop entries in byres.
		// The file is then marked with this layout, so that a binary of
		// layout 4 refuses it once this one has written its journal.
		if err := repairLive(tx); err != nil {
			return err
		}
		return meta.Put(keyLayout, u64(layout))
	}
	if have == layout {
		return nil
	}
	if have < 2 {
		byres := tx.Bucket(bByRes)
		err = tx.Bucket(bReceipts).ForEach(func(_, v []byte) error {
			var r fencegate.Receipt
			if err := decodeReceipt(v, &r); err != nil {
				return fmt.Errorf("decode receipt: %w", err)
			}
			return byres.Put(join([]byte(r.Resource), timeKey(r.CreatedAt), []byte(r.ID)), []byte(r.ID))
		})
		if err != nil {
			return err
		}
	}
	if have < 3 {
		if err := rekeyQuarantine(tx); err != nil {
			return err
		}
	}
	if have < 4 {
		if err := moveLive(tx); err != nil {
			return err
		}
	}
	return meta.Put(keyLayout, u64(layout))
}

// moveLive moves the entries of layout 3's live bucket (resource 0 fence
// segment -> receipt ID) into byres under liveKey, and drops the bucket.
func moveLive(tx *bolt.Tx) error {
	old := tx.Bucket(bLive)
	if old == nil {
		return nil
	}
	byres := tx.Bucket(bByRes)
	err := old.ForEach(func(k, id []byte) error {
		if len(k) < 17 || k[len(k)-17] != 0 {
			return fmt.Errorf("live index key %q is not resource 0 fence segment", k)
		}
		fence, seg := binary.BigEndian.Uint64(k[len(k)-16:]), binary.BigEndian.Uint64(k[len(k)-8:])
		return byres.Put(liveKey(string(k[:len(k)-17]), fence, seg), id)
	})
	if err != nil {
		return err
	}
	return tx.DeleteBucket(bLive)
}

// repairLive mends the live index of a layout 4 file that an older binary
// has used (a rollback, then this binary again): the live entries it
// added to its own bucket are moved into byres (newer than any there for
// the same fence and segment), and an entry in byres naming a receipt it
// settled NOT_APPLIED or FAILED (DropLive) or compacted is deleted.
func repairLive(tx *bolt.Tx) error {
	if err := moveLive(tx); err != nil {
		return err
	}
	byres, receipts := tx.Bucket(bByRes), tx.Bucket(bReceipts)
	var stale [][]byte
	err := byres.ForEach(func(k, id []byte) error {
		if _, _, _, ok := splitLiveKey(k); !ok {
			return nil // a by-resource entry
		}
		v := receipts.Get(id)
		if v != nil {
			var r fencegate.Receipt
			if err := decodeReceipt(v, &r); err != nil {
				return fmt.Errorf("decode receipt %q: %w", id, err)
			}
			if !r.State.NotApplied() {
				return nil
			}
		}
		stale = append(stale, bytes.Clone(k))
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range stale {
		if err := byres.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// putIndexes adds a new receipt to the by-operation and by-resource indexes.
func putIndexes(tx *bolt.Tx, r *fencegate.Receipt) error {
	if err := treeOf(tx, bByOp).Put(join([]byte(r.OperationID), timeKey(r.CreatedAt), []byte(r.ID)), []byte(r.ID)); err != nil {
		return err
	}
	return treeOf(tx, bByRes).Put(join([]byte(r.Resource), timeKey(r.CreatedAt), []byte(r.ID)), []byte(r.ID))
}

// ReceiptsByOperation implements fencegate.FenceStore.
func (s *Store) ReceiptsByOperation(ctx context.Context, operationID string, page fencegate.Page) (fencegate.ReceiptPage, error) {
	return s.scanIndex(ctx, bByOp, operationID, fencerules.ByOperationList(operationID), page)
}

// ReceiptsByResource implements fencegate.FenceStore.
func (s *Store) ReceiptsByResource(ctx context.Context, resource string, page fencegate.Page) (fencegate.ReceiptPage, error) {
	return s.scanIndex(ctx, bByRes, resource, fencerules.ByResourceList(resource), page)
}

// ReceiptsByState implements fencegate.FenceStore.
func (s *Store) ReceiptsByState(ctx context.Context, state fencegate.ReceiptState, page fencegate.Page) (fencegate.ReceiptPage, error) {
	return s.scanIndex(ctx, bByState, string(state), fencerules.ByStateList(state), page)
}

// scanIndex reads one page of an index whose keys are prefix 0 createdAt ID,
// seeking straight to the key after the cursor's position.
func (s *Store) scanIndex(ctx context.Context, bucket []byte, prefix, list string, page fencegate.Page) (fencegate.ReceiptPage, error) {
	pg, after, from, err := fencerules.NewPager(list, page)
	if err != nil {
		return fencegate.ReceiptPage{}, err
	}
	out := fencegate.ReceiptPage{Receipts: []fencegate.Receipt{}}
	err = s.view(ctx, func(tx *bolt.Tx) error {
		p := append([]byte(prefix), 0)
		start := p
		if from {
			start = join([]byte(prefix), timeKey(after.At), []byte(after.ID))
		}
		c := treeOf(tx, bucket).Cursor()
		receipts := treeOf(tx, bReceipts)
		k, id := c.Seek(start)
		if from && bytes.Equal(k, start) {
			k, id = c.Next()
		}
		for ; k != nil && bytes.HasPrefix(k, p); k, id = c.Next() {
			raw := receipts.Get(id)
			if raw == nil {
				return fmt.Errorf("index entry for missing receipt %q", id)
			}
			var r fencegate.Receipt
			if err := decodeReceipt(raw, &r); err != nil {
				return fmt.Errorf("decode receipt %q: %w", id, err)
			}
			if !pg.Take(fencegate.ReceiptPosition(&r), r.ApproxSize()) {
				break
			}
			out.Receipts = append(out.Receipts, r)
		}
		return nil
	})
	if err != nil {
		return fencegate.ReceiptPage{}, storeErr(err, "list receipts")
	}
	out.Next = pg.Next
	return out, nil
}

// Quarantined implements fencegate.FenceStore: a page of records by
// resource, first time, ID, seeking to the cursor's key.
func (s *Store) Quarantined(ctx context.Context, resource string, page fencegate.Page) (fencegate.QuarantinePage, error) {
	pg, after, from, err := fencerules.NewPager(fencerules.QuarantineList(resource), page)
	if err != nil {
		return fencegate.QuarantinePage{}, err
	}
	out := fencegate.QuarantinePage{Records: []fencegate.Quarantine{}}
	err = s.view(ctx, func(tx *bolt.Tx) error {
		var p []byte
		if resource != "" {
			p = append([]byte(resource), 0)
		}
		start := p
		if from {
			start = quarantineKey(after.Group, after.At, after.ID)
		}
		c := tx.Bucket(bQuarantine).Cursor()
		k, v := c.Seek(start)
		if from && bytes.Equal(k, start) {
			k, v = c.Next()
		}
		for ; k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			var q fencegate.Quarantine
			if err := decodeQuarantine(v, &q); err != nil {
				return fmt.Errorf("decode quarantine record: %w", err)
			}
			if !pg.Take(fencegate.QuarantinePosition(&q), q.ApproxSize()) {
				break
			}
			out.Records = append(out.Records, q)
		}
		return nil
	})
	if err != nil {
		return fencegate.QuarantinePage{}, storeErr(err, "list quarantine")
	}
	out.Next = pg.Next
	return out, nil
}

// QuarantineRecord implements fencegate.FenceStore.
func (s *Store) QuarantineRecord(ctx context.Context, id string) (fencegate.Quarantine, error) {
	var q fencegate.Quarantine
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var found bool
		var err error
		q, found, err = getQuarantine(tx, id)
		if err == nil && !found {
			err = fencegate.Errorf(fencegate.CodeNotFound, "no quarantine record %q", id)
		}
		return err
	})
	if err != nil {
		return fencegate.Quarantine{}, storeErr(err, "read quarantine")
	}
	return q, nil
}

func quarantineKey(resource string, at time.Time, id string) []byte {
	return join([]byte(resource), timeKey(at), []byte(id))
}

func getQuarantine(tx *bolt.Tx, id string) (fencegate.Quarantine, bool, error) {
	var q fencegate.Quarantine
	key := tx.Bucket(bQIDs).Get([]byte(id))
	if key == nil {
		return q, false, nil
	}
	v := tx.Bucket(bQuarantine).Get(key)
	if v == nil {
		return q, false, fmt.Errorf("quarantine index names a missing record %q", id)
	}
	if err := decodeQuarantine(v, &q); err != nil {
		return q, false, fmt.Errorf("decode quarantine record %q: %w", id, err)
	}
	return q, true, nil
}

// putQuarantine writes the record of a quarantined req, or counts another
// attempt on the record of the same refused request (which keeps naming its
// first sender: fencerules.QuarantineAgain).
func putQuarantine(tx *bolt.Tx, req *fencegate.AdmitRequest, live *fencegate.Receipt) error {
	g := &req.Grant
	id := fencegate.QuarantineID(g.Resource, g.FenceToken, req.Segment, req.Target, req.Method, req.EffectKey, req.PayloadDigest)
	q, found, err := getQuarantine(tx, id)
	if err != nil {
		return err
	}
	if found {
		// The repeat moves the record's last attempt: its entry in the
		// last-attempt index moves with it (qretain.go).
		if err := unindexLast(tx, &q, quarantineKey(q.Resource, q.At, q.ID)); err != nil {
			return err
		}
		q = fencerules.QuarantineAgain(q, req.Now)
	} else {
		q = fencerules.QuarantineRecord(req, live)
	}
	return storeQuarantine(tx, &q)
}

func storeQuarantine(tx *bolt.Tx, q *fencegate.Quarantine) error {
	key := quarantineKey(q.Resource, q.At, q.ID)
	v, err := encodeQuarantine(q)
	if err != nil {
		return err
	}
	if err := tx.Bucket(bQuarantine).Put(key, v); err != nil {
		return err
	}
	if err := indexQuarantine(tx, q.ReceiptID, key); err != nil {
		return err
	}
	if err := indexLast(tx, q, key); err != nil {
		return err
	}
	return tx.Bucket(bQIDs).Put([]byte(q.ID), key)
}

// rekeyQuarantine turns the quarantine records of layout 2 and older (keyed
// resource 0 at sequence, one per attempt, no ID, target or method) into
// layout 3 records: one per distinct refused request, Attempts their count.
func rekeyQuarantine(tx *bolt.Tx) error {
	old := tx.Bucket(bQuarantine)
	merged := map[string]fencegate.Quarantine{}
	var order []string
	err := old.ForEach(func(_, v []byte) error {
		var q fencegate.Quarantine
		if err := decodeQuarantine(v, &q); err != nil {
			return fmt.Errorf("decode quarantine record: %w", err)
		}
		if q.ID != "" { // already layout 3
			merged[q.ID] = q
			order = append(order, q.ID)
			return nil
		}
		q.ID = fencegate.QuarantineID(q.Resource, q.FenceToken, q.Segment, q.Target, q.Method, q.EffectKey, q.PayloadDigest)
		if m, ok := merged[q.ID]; ok {
			merged[q.ID] = fencerules.QuarantineAgain(m, q.At)
			return nil
		}
		q.LastAt, q.Attempts = q.At, 1
		merged[q.ID] = q
		order = append(order, q.ID)
		return nil
	})
	if err != nil {
		return err
	}
	if err := tx.DeleteBucket(bQuarantine); err != nil {
		return err
	}
	if _, err := tx.CreateBucket(bQuarantine); err != nil {
		return err
	}
	for _, id := range order {
		q := merged[id]
		if err := storeQuarantine(tx, &q); err != nil {
			return err
		}
	}
	return nil
}
