package registry

// SetTestHookBeforeLost sets the hook that runs between a guard's refusal
// and lostOnGuard, and returns what restores it.
func SetTestHookBeforeLost(f func()) (restore func()) {
	prev := testHookBeforeLost
	testHookBeforeLost = f
	return func() { testHookBeforeLost = prev }
}

// Parked reports how many acquirers sleep between attempts now, and how
// many times one went to sleep.
func Parked(r *Registry) (now, ever int) {
	r.released.mu.Lock()
	defer r.released.mu.Unlock()
	return r.released.parked, r.released.parks
}
