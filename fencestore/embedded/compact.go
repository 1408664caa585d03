package embedded

import (
	"bytes"
	"context"
	"maps"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

var _ fencegate.Compactor = (*Store)(nil)

// compactExamine bounds the by-state entries one transaction of
// CompactReceipts examines (a variable for tests). The walk runs inside a
// batched write transaction, which every admission queued meanwhile waits
// for: about 2 µs an entry, so 1024 hold the writer for about as long as a
// commit's syncs take, where a walk over 40,000 kept receipts held it 88 ms.
var compactExamine = 1024

// compactStates are the states CompactReceipts deletes, in the order it
// walks them.
var compactStates = []fencegate.ReceiptState{fencegate.ReceiptFailed, fencegate.ReceiptNotApplied, fencegate.ReceiptCommitted}

// CompactReceipts implements fencegate.Compactor in steps, each one write
// op that examines at most compactExamine entries: for each settled state
// it walks the by-state index (in creation order, so it stops at the first
// receipt created at or after `before`) and deletes the receipts the rules
// allow, with their live, by-operation, by-resource and by-state entries.
// A step that stops at the bound is followed by another (compactSteps),
// queued behind the writes that arrived meanwhile, until the call has
// deleted limit receipts or walked every state up to `before`: the call's
// answer means what it always meant (fewer than limit: nothing more to
// delete now), and no admission waits for more than one step.
//
// Where a walk stops (at limit, at the bound, or at a state not reached)
// is kept per state, and the next step or call resumes there, so that a
// sweep of calls (the retention worker's, while each deletes limit)
// examines each receipt the rules keep once, not once per call; a walk
// that reaches its end starts the next call from the beginning, where kept
// receipts may since have become compactable. It returns the receipts
// deleted, also with an error (by the steps committed before it).
func (s *Store) CompactReceipts(ctx context.Context, before time.Time, limit int) (int, error) {
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	walked := map[fencegate.ReceiptState]bool{} // states this call has walked to their end
	return compactSteps(ctx, limit, func(limit int) (int, bool, error) {
		return s.compactStep(before, limit, walked)
	})
}

// compactSteps is the step loop of CompactReceipts and CompactQuarantine:
// it runs step, each call one write op (one s.batch.do) that deletes at
// most the limit it is given (what is left of limit) within its own
// per-transaction bound, until a step fails, reports nothing more to do
// (more false) or brings the total to limit; between steps it stops at
// ctx's end (before the first too). Each step is queued behind the writes
// that arrived during the one before, so no admission waits for more than
// one step. It returns the total deleted, also with an error (by the steps
// committed before it).
func compactSteps(ctx context.Context, limit int, step func(limit int) (deleted int, more bool, err error)) (int, error) {
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, ctxErr(err)
		}
		if limit <= 0 {
			return 0, nil
		}
		n, more, err := step(limit - total)
		total += n
		if err != nil || !more || total >= limit {
			return total, err
		}
	}
}

// compactStep is one step of CompactReceipts: one write op that examines
// at most compactExamine by-state entries of the states not in walked,
// from where the last step stopped, and deletes at most limit receipts.
// more reports that it stopped at the bound; the states it walked to their
// end are added to walked.
func (s *Store) compactStep(before time.Time, limit int, walked map[fencegate.ReceiptState]bool) (deleted int, more bool, err error) {
	var (
		n       int
		next    map[fencegate.ReceiptState][]byte
		ended   []fencegate.ReceiptState
		scanned int
	)
	err = s.batch.do(func(tx *bolt.Tx) error {
		// Reset: the op may run again.
		n, more, ended, scanned, next = 0, false, nil, 0, maps.Clone(s.compactFrom)
		if next == nil {
			next = map[fencegate.ReceiptState][]byte{}
		}
		var doomed []fencegate.Receipt
	states:
		for _, state := range compactStates {
			if walked[state] {
				continue
			}
			prefix := join([]byte(state))
			c := treeOf(tx, bByState).Cursor()
			k, id := c.Seek(prefix)
			if from := s.compactFrom[state]; from != nil {
				if k, id = c.Seek(from); bytes.Equal(k, from) {
					k, id = c.Next() // examined (and kept) by the step before
				}
			}
			for ; ; k, id = c.Next() {
				if k == nil || !bytes.HasPrefix(k, prefix) {
					next[state], ended = nil, append(ended, state)
					break
				}
				if len(doomed) == limit {
					break states // next[state]: the last examined, or where it was
				}
				if scanned == compactExamine {
					more = true
					break states
				}
				scanned++
				r, err := getReceipt(tx, string(id))
				if err != nil {
					return err
				}
				if !r.CreatedAt.Before(before) {
					next[state], ended = nil, append(ended, state)
					break
				}
				next[state] = bytes.Clone(k)
				row, _, err := getResource(tx, r.Resource)
				if err != nil {
					return err
				}
				// A quarantine record naming it only keeps it
				// (fencerules.Compactable), so whether one does (one
				// seek in the quarantine index, qindex.go) is asked only
				// of a receipt the other rules would delete.
				if fencerules.Compactable(&r, row, false, before) && !quarantineNames(tx, r.ID) {
					doomed = append(doomed, r)
				}
			}
		}
		for i := range doomed {
			if err := deleteReceipt(tx, &doomed[i]); err != nil {
				return err
			}
		}
		n = len(doomed)
		return nil
	})
	if err != nil {
		return 0, false, storeErr(err, "compact receipts")
	}
	s.compactFrom = next
	for _, state := range ended {
		walked[state] = true
	}
	s.compactScanned.Add(uint64(scanned))
	return n, more, nil
}

// deleteReceipt deletes r with its live, by-operation, by-resource and
// by-state entries.
func deleteReceipt(tx *bolt.Tx, r *fencegate.Receipt) error {
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
	return nil
}
