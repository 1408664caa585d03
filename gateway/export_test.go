package gateway

import "time"

// LockHolders reports how many Applies hold or wait for resource's lock in
// g (tests wait for a request to queue behind another without sleeping).
func LockHolders(g *Gateway, resource string) int {
	g.locks.mu.Lock()
	defer g.locks.mu.Unlock()
	if e := g.locks.m[resource]; e != nil {
		return e.refs
	}
	return 0
}

// ModeChangeWaiting reports whether a Modes.Set waits for shadow forwards
// in flight (tests see the switch wait without sleeping).
func ModeChangeWaiting(m *Modes) bool {
	if m.forwarding.TryRLock() {
		m.forwarding.RUnlock()
		return false
	}
	return true
}

// SetSettleTimeout sets the bound of one Settle attempt, for the test; it
// returns a func that restores it.
func SetSettleTimeout(d time.Duration) func() {
	old := settleTimeout
	settleTimeout = d
	return func() { settleTimeout = old }
}

// SetPassLimit sets how many receipts of each state a reconcile pass looks
// at, for the test; it returns a func that restores it.
func SetPassLimit(n int) func() {
	old := passLimit
	passLimit = n
	return func() { passLimit = old }
}

// SetQueryTimeout sets the bound of one registry query, for the test; it
// returns a func that restores it.
func SetQueryTimeout(d time.Duration) func() {
	old := queryTimeout
	queryTimeout = d
	return func() { queryTimeout = old }
}
