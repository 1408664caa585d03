package chaos

import (
	"testing"

	"github.com/fencegate/fencegate/internal/netfault"
)

// links are the TCP proxies (package netfault) between each replica and the
// stores it uses: one per replica and store, so a fault can hit one
// replica's link alone.
type links struct {
	ps *netfault.Proxies
}

func newLinks() *links { return &links{ps: netfault.New()} }

// link is one proxied route with the faults the nemesis injects on it.
type link = netfault.Link

// open starts a link from a random loopback port to upstream; it is stopped
// when the test ends.
func (ls *links) open(t *testing.T, name, upstream string) *link {
	t.Helper()
	l, err := ls.ps.Open(name, upstream)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}
