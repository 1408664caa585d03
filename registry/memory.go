package registry

import (
	"time"

	"github.com/fencegate/fencegate"
)

// Memory keeps what a registry last saw of its coordination backend (marker,
// revision, highest fence) across restarts, outside the backend: a backend
// that comes back older than this, or with another marker, lost state.
type Memory interface {
	Load() (Remembered, error)
	Save(Remembered) error
}

// Remembered is what a registry keeps in its Memory: the incarnation it
// issues under and, while grants are paused after a loss, when they resume,
// so that a registry restarted during the pause waits it out (every status
// proof signed before the loss has expired by then) instead of granting at
// once; likewise, while new grants are held after a start without memory
// (recovery.hold), when the hold ends. Its JSON is the incarnation's with
// resumeAt and holdUntil beside it.
type Remembered struct {
	fencegate.Incarnation
	ResumeAt  time.Time `json:"resumeAt,omitzero"`
	HoldUntil time.Time `json:"holdUntil,omitzero"`
}

// Remember saves what this registry has seen of the backend to Memory.
func (r *Registry) Remember() error {
	if r.memory == nil {
		return nil
	}
	r.rec.save.Lock()
	defer r.rec.save.Unlock()
	return r.rememberLocked()
}

// rememberLocked saves what is seen now; the caller holds rec.save. Before
// Check has loaded Memory it saves nothing: what is seen then (no marker,
// this process's revisions) would overwrite an earlier process's record and
// hide a restore from Check.
func (r *Registry) rememberLocked() error {
	r.rec.mu.Lock()
	seen, checked := r.rec.seen, r.rec.checked
	var resume time.Time
	if r.rec.lost && r.rec.claimed {
		resume = r.rec.resume
	}
	hold := r.rec.hold
	r.rec.mu.Unlock()
	if !checked {
		return nil
	}
	if err := r.memory.Save(Remembered{Incarnation: seen, ResumeAt: resume, HoldUntil: hold}); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "save the registry's incarnation memory")
	}
	r.rec.saved = seen
	return nil
}

// rememberIssued makes Memory cover l, an acquisition just issued (observed),
// before its grant is returned: a registry restarted on a backend restored
// from before l then finds the revision behind what it saw (a loss) instead
// of handing l's fence out again. Acquisitions at once share a save: one
// made after l was observed covers it.
func (r *Registry) rememberIssued(l fencegate.Lease) error {
	if r.memory == nil {
		return nil
	}
	r.rec.save.Lock()
	defer r.rec.save.Unlock()
	r.rec.mu.Lock()
	covered := r.rec.saved.ID == r.rec.seen.ID && r.rec.saved.Revision >= l.Revision
	r.rec.mu.Unlock()
	if covered {
		return nil
	}
	return r.rememberLocked()
}
