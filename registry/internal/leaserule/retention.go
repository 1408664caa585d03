package leaserule

import (
	"time"

	"github.com/fencegate/fencegate"
)

// DefaultRetention is how long a lease record and its request ID outlive the
// lease's expiry unless a backend is told otherwise.
const DefaultRetention = 7 * 24 * time.Hour

// MinRetention is the shortest retention a backend accepts: a request ID must
// stay answerable for every retry of a lost acquisition, and Redis expires
// records on its own clock, which may run ahead of the registry's.
const MinRetention = time.Hour

// PruneBatch is the most forgotten lease records one acquisition, or one
// Prune of a backend, deletes, so pruning adds a bounded amount of work to
// each.
const PruneBatch = 16

// Retention is the retention a backend applies for the configured d: 0 keeps
// records for ever, anything else is at least MinRetention.
func Retention(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return max(d, MinRetention)
}

// Forgotten is the retention rule every backend applies: a lease record
// whose stored state is stored and whose expiry is expires is forgotten at now
// once it is no longer held and now is at least expires + retention (0 keeps
// it for ever). A forgotten record and its request key may be deleted, and a
// reuse of its request ID is a new acquisition. A released lease counts from
// its expiry too (it ended earlier, so this only keeps it longer); a renewal
// moves the expiry, so a lease renewed keeps its record. Per-resource fence
// state, the floor, the highest fence and the incarnation are never subject
// to it: fences stay monotonic.
func Forgotten(stored fencegate.StatusState, expires, now time.Time, retention time.Duration) bool {
	if retention <= 0 || now.Before(expires.Add(retention)) {
		return false
	}
	return StateAt(stored, expires, now) != fencegate.StateHeld
}

// ForgottenBefore is the latest expiry a record forgotten at now can have:
// records expiring at or before it are past retention; ok is false when
// retention keeps everything.
func ForgottenBefore(now time.Time, retention time.Duration) (cutoff time.Time, ok bool) {
	if retention <= 0 {
		return time.Time{}, false
	}
	return now.Add(-retention), true
}
