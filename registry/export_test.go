package registry

// SetTestHookBeforeLost sets the hook that runs between a guard's refusal
// and lostOnGuard, and returns what restores it.
func SetTestHookBeforeLost(f func()) (restore func()) {
	prev := testHookBeforeLost
	testHookBeforeLost = f
	return func() { testHookBeforeLost = prev }
}
