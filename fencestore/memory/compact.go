package memory

import (
	"context"
	"sort"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

var _ fencegate.Compactor = (*Store)(nil)

// CompactReceipts implements fencegate.Compactor.
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
	var doomed []fencegate.Receipt
	for _, r := range s.receipts {
		if fencerules.Compactable(&r, s.resources[r.Resource], quarantined[r.ID], before) {
			doomed = append(doomed, r)
		}
	}
	sort.Slice(doomed, func(i, j int) bool {
		a, b := doomed[i], doomed[j]
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.Before(b.CreatedAt)
		}
		return a.ID < b.ID
	})
	n := 0
	for _, r := range doomed {
		if n == max(limit, 0) {
			break
		}
		delete(s.receipts, r.ID)
		if k := (liveKey{r.Resource, r.FenceToken, r.Segment}); s.live[k] == r.ID {
			delete(s.live, k)
		}
		n++
	}
	return n, nil
}

// CompactQuarantine implements fencegate.Compactor: it deletes up to limit
// records whose last attempt is before `before` (fencerules.QuarantineExpired),
// oldest last attempt first.
func (s *Store) CompactQuarantine(ctx context.Context, before time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "compact quarantine")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var doomed []fencegate.Quarantine
	for _, q := range s.quarantine {
		if fencerules.QuarantineExpired(&q, before) {
			doomed = append(doomed, q)
		}
	}
	sort.Slice(doomed, func(i, j int) bool {
		a, b := doomed[i], doomed[j]
		if !a.LastAt.Equal(b.LastAt) {
			return a.LastAt.Before(b.LastAt)
		}
		return a.ID < b.ID
	})
	n := 0
	for _, q := range doomed {
		if n == max(limit, 0) {
			break
		}
		delete(s.quarantine, q.ID)
		n++
	}
	return n, nil
}
