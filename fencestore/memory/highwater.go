package memory

import (
	"context"

	"github.com/fencegate/fencegate"
)

var _ fencegate.HighWater = (*Store)(nil)

// HighestFence implements fencegate.HighWater.
func (s *Store) HighestFence(ctx context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var top uint64
	for _, row := range s.resources {
		top = max(top, row.HighestFence)
	}
	return top, nil
}
