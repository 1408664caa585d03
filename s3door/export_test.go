package s3door

import (
	"fmt"
	"time"
)

// StatusRecheck is how long a lease read HELD is not read again when a
// create would be refused TooManyUploads.
const StatusRecheck = statusRecheck

// SetStatusBudget sets the time one create at a bound spends reading the
// leases in its way (statusBudget).
func (s *Server) SetStatusBudget(d time.Duration) { s.statusBudget = d }

// OnAwaitReads calls f each time a create at a bound starts waiting for
// the reads another create is making of leases in its way.
func (s *Server) OnAwaitReads(f func()) {
	s.uploads.mu.Lock()
	s.uploads.onAwait = f
	s.uploads.mu.Unlock()
}

// StagingHeld is what the staging budget holds in all and for identity.
func (s *Server) StagingHeld(identity string) (all, mine int64) {
	s.uploads.mu.Lock()
	defer s.uploads.mu.Unlock()
	return s.uploads.held, s.uploads.ours[identity]
}

// StagingInStep reports where the per-identity counts are out of step with
// the budget's, with no part in flight: each identity holds what its
// uploads' running totals (held) say, they add up to what the budget
// holds, and an identity holding nothing has no entry. It does not recount
// the parts' charges (the tests' explicit byte counts check those).
func (s *Server) StagingInStep() error {
	us := s.uploads
	us.mu.Lock()
	defer us.mu.Unlock()
	uploads := map[string]int64{}
	for _, u := range us.m {
		if u.held != 0 {
			uploads[u.identity] += u.held
		}
	}
	var sum int64
	for id, n := range us.ours {
		sum += n
		if n != uploads[id] {
			return fmt.Errorf("identity %q holds %d, its uploads %d", id, n, uploads[id])
		}
	}
	if len(uploads) != len(us.ours) {
		return fmt.Errorf("identities holding bytes: %v, uploads holding bytes: %v", us.ours, uploads)
	}
	if sum != us.held {
		return fmt.Errorf("the identities hold %d, the budget %d", sum, us.held)
	}
	return nil
}
