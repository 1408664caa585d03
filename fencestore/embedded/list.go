package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

// layout is the bucket layout this code writes (see the package doc).
const layout = 2

var (
	bMeta     = []byte("meta")
	keyLayout = []byte("layout")
)

// upgrade brings a file of an older layout to the current one, in Open's
// transaction: layout 1 lacked the byres index, which is built from receipts.
func upgrade(tx *bolt.Tx) error {
	meta, err := tx.CreateBucketIfNotExists(bMeta)
	if err != nil {
		return err
	}
	have := uint64(1)
	if v := meta.Get(keyLayout); len(v) == 8 {
		have = binary.BigEndian.Uint64(v)
	}
	if have >= layout {
		return nil
	}
	byres := tx.Bucket(bByRes)
	err = tx.Bucket(bReceipts).ForEach(func(_, v []byte) error {
		var r fencegate.Receipt
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("decode receipt: %w", err)
		}
		return byres.Put(join([]byte(r.Resource), timeKey(r.CreatedAt), []byte(r.ID)), []byte(r.ID))
	})
	if err != nil {
		return err
	}
	return meta.Put(keyLayout, u64(layout))
}

// putIndexes adds a new receipt to the by-operation and by-resource indexes.
func putIndexes(tx *bolt.Tx, r *fencegate.Receipt) error {
	if err := tx.Bucket(bByOp).Put(join([]byte(r.OperationID), timeKey(r.CreatedAt), []byte(r.ID)), []byte(r.ID)); err != nil {
		return err
	}
	return tx.Bucket(bByRes).Put(join([]byte(r.Resource), timeKey(r.CreatedAt), []byte(r.ID)), []byte(r.ID))
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
		c := tx.Bucket(bucket).Cursor()
		k, id := c.Seek(start)
		if from && bytes.Equal(k, start) {
			k, id = c.Next()
		}
		for ; k != nil && bytes.HasPrefix(k, p); k, id = c.Next() {
			raw := tx.Bucket(bReceipts).Get(id)
			if raw == nil {
				return fmt.Errorf("index entry for missing receipt %q", id)
			}
			var r fencegate.Receipt
			if err := json.Unmarshal(raw, &r); err != nil {
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

// Quarantined implements fencegate.FenceStore. Records come ordered by
// resource, then time.
func (s *Store) Quarantined(ctx context.Context, resource string) ([]fencegate.Quarantine, error) {
	out := []fencegate.Quarantine{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var p []byte
		if resource != "" {
			p = append([]byte(resource), 0)
		}
		c := tx.Bucket(bQuarantine).Cursor()
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			var q fencegate.Quarantine
			if err := json.Unmarshal(v, &q); err != nil {
				return fmt.Errorf("decode quarantine record: %w", err)
			}
			out = append(out, q)
		}
		return nil
	})
	if err != nil {
		return nil, storeErr(err, "list quarantine")
	}
	return out, nil
}
