package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

var _ fencegate.Compactor = (*Store)(nil)

// CompactReceipts implements fencegate.Compactor as one write op: for each
// settled state it walks the by-state index (in creation order, so it stops
// at the first receipt created at or after `before`) and deletes the
// receipts the rules allow, with their live, by-operation, by-resource and
// by-state entries. A walk that stops at limit is resumed by the next call
// where it stopped, so that a sweep of calls (the retention worker's, while
// each deletes limit) examines each receipt the rules keep once, not once
// per call; a walk that reaches its end starts the next call from the
// beginning, where kept receipts may since have become compactable.
func (s *Store) CompactReceipts(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, ctxErr(err)
	}
	if limit <= 0 {
		return 0, nil
	}
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	var (
		n       int
		next    map[fencegate.ReceiptState][]byte
		scanned uint64
	)
	err := s.batch.do(func(tx *bolt.Tx) error {
		n, scanned, next = 0, 0, map[fencegate.ReceiptState][]byte{}
		var doomed []fencegate.Receipt
		for _, state := range []fencegate.ReceiptState{fencegate.ReceiptFailed, fencegate.ReceiptNotApplied, fencegate.ReceiptCommitted} {
			prefix := join([]byte(state))
			c := treeOf(tx, bByState).Cursor()
			var last []byte
			k, id := c.Seek(prefix)
			if from := s.compactFrom[state]; from != nil {
				if k, id = c.Seek(from); bytes.Equal(k, from) {
					k, id = c.Next() // examined (and kept) by the call before
				}
			}
			for ; k != nil && bytes.HasPrefix(k, prefix); k, id = c.Next() {
				if len(doomed) == limit {
					next[state] = last // stopped at the limit: resume after the last examined
					break
				}
				last = bytes.Clone(k)
				scanned++
				r, err := getReceipt(tx, string(id))
				if err != nil {
					return err
				}
				if !r.CreatedAt.Before(before) {
					break
				}
				row, _, err := getResource(tx, r.Resource)
				if err != nil {
					return err
				}
				q, err := quarantineNames(tx, r.Resource, r.ID)
				if err != nil {
					return err
				}
				if fencerules.Compactable(&r, row, q, before) {
					doomed = append(doomed, r)
				}
			}
		}
		for i := range doomed {
			r := &doomed[i]
			if err := treeOf(tx, bReceipts).Delete([]byte(r.ID)); err != nil {
				return err
			}
			lk := liveKey(r.Resource, r.FenceToken, r.Segment)
			if bytes.Equal(treeOf(tx, bByRes).Get(lk), []byte(r.ID)) {
				if err := treeOf(tx, bByRes).Delete(lk); err != nil {
					return err
				}
			}
			for _, e := range []struct {
				b   []byte
				key []byte
			}{
				{bByOp, join([]byte(r.OperationID), timeKey(r.CreatedAt), []byte(r.ID))},
				{bByRes, join([]byte(r.Resource), timeKey(r.CreatedAt), []byte(r.ID))},
				{bByState, stateKey(r.State, r)},
			} {
				if err := treeOf(tx, e.b).Delete(e.key); err != nil {
					return err
				}
			}
		}
		n = len(doomed)
		return nil
	})
	if err != nil {
		return 0, storeErr(err, "compact receipts")
	}
	s.compactFrom = next
	s.compactScanned.Add(scanned)
	return n, nil
}

// quarantineNames reports whether a quarantine record of resource names
// receipt id.
func quarantineNames(tx *bolt.Tx, resource, id string) (bool, error) {
	prefix := join([]byte(resource))
	c := tx.Bucket(bQuarantine).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var q fencegate.Quarantine
		if err := json.Unmarshal(v, &q); err != nil {
			return false, err
		}
		if q.ReceiptID == id {
			return true, nil
		}
	}
	return false, nil
}
