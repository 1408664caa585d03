package gateway

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
