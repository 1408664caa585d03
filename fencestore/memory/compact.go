package memory

import (
	"context"
	"sort"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

var _ fencegate.Compactor = (*Store)(nil)

// CompactReceipts implements fencegate.Compactor: it deletes up to limit
// receipts the rules allow (fencerules.Compactable), oldest first (ties by
// ID).
func (s *Store) CompactReceipts(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "compact receipts")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	quarantined := map[string]bool{}
	for _, q := range s.quarantine {
		quarantined[q.ReceiptID] = true
	}
	return deleteOldest(s.receipts, limit,
		func(r *fencegate.Receipt) bool {
			return fencerules.Compactable(r, s.resources[r.Resource], quarantined[r.ID], before)
		},
		func(r *fencegate.Receipt) (time.Time, string) { return r.CreatedAt, r.ID },
		func(r *fencegate.Receipt) {
			if k := (liveKey{r.Resource, r.FenceToken, r.Segment}); s.live[k] == r.ID {
				delete(s.live, k)
			}
		}), nil
}

// CompactQuarantine implements fencegate.Compactor: it deletes up to limit
// records whose last attempt is before `before` (fencerules.QuarantineExpired),
// oldest last attempt first (ties by ID).
func (s *Store) CompactQuarantine(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "compact quarantine")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return deleteOldest(s.quarantine, limit,
		func(q *fencegate.Quarantine) bool { return fencerules.QuarantineExpired(q, before) },
		func(q *fencegate.Quarantine) (time.Time, string) { return q.LastAt, q.ID },
		func(*fencegate.Quarantine) {}), nil
}

// deleteOldest deletes from m (keyed by ID) up to limit (none if limit is
// 0 or less) of the values doomed selects, in the order key gives them
// (time, then ID), and calls also on each one deleted to drop what else
// refers to it. It returns how many it deleted; s.mu is held.
func deleteOldest[T any](m map[string]T, limit int, doomed func(*T) bool, key func(*T) (time.Time, string), also func(*T)) int {
	var picked []T
	for _, v := range m {
		if doomed(&v) {
			picked = append(picked, v)
		}
	}
	sort.Slice(picked, func(i, j int) bool {
		at, a := key(&picked[i])
		bt, b := key(&picked[j])
		if !at.Equal(bt) {
			return at.Before(bt)
		}
		return a < b
	})
	n := min(max(limit, 0), len(picked))
	for i := range picked[:n] {
		_, id := key(&picked[i])
		delete(m, id)
		also(&picked[i])
	}
	return n
}
