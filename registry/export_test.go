package registry

import "context"

// SetTestHookBeforeLost sets the hook that runs between a guard's refusal
// and lostOnGuard, and returns what restores it.
func SetTestHookBeforeLost(f func()) (restore func()) {
	prev := testHookBeforeLost
	testHookBeforeLost = f
	return func() { testHookBeforeLost = prev }
}

// SetTestHookParked sets the hook that runs each time an acquirer goes to
// sleep between attempts, and returns what restores it.
func SetTestHookParked(f func()) (restore func()) {
	prev := testHookParked
	testHookParked = f
	return func() { testHookParked = prev }
}

// PruneForTest runs the prune a Watch runs after its check (prune), without
// the check, so that a test reaches it in states the check answers first.
func (r *Registry) PruneForTest(ctx context.Context) error { return r.prune(ctx) }
