package loopback

import (
	"net"
	"net/netip"
	"strconv"
	"testing"
)

// TestFreeAddrHandsOutPortsBelowTheEphemeralRangeOnce: the kernel never gives
// FreeAddr's ports to an outgoing connection or a listener on port 0, and no
// port is handed out twice in a process, so a gateway started (or restarted
// after a kill) on one does not find it taken.
func TestFreeAddrHandsOutPortsBelowTheEphemeralRangeOnce(t *testing.T) {
	span := portRange()
	seen := map[uint16]bool{}
	for range 200 {
		ap := mustFree(t)
		p := ap.Port()
		if int(p) < span[0] || int(p) >= span[1] || reserved[int(p)] {
			t.Fatalf("port %d outside [%d, %d) or reserved", p, span[0], span[1])
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	// An ephemeral listener's port is never one FreeAddr hands out.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if p := l.Addr().(*net.TCPAddr).Port; p >= span[0] && p < span[1] {
		t.Fatalf("the kernel gave port %d, inside FreeAddr's range [%d, %d)", p, span[0], span[1])
	}
}

// TestFreeAddrSkipsAPortSomethingListensOn: a port bound by another socket is
// not handed out; when every port is bound, FreeAddr says so.
func TestFreeAddrSkipsAPortSomethingListensOn(t *testing.T) {
	lo := portRange()[1] - 8
	busy := map[string]bool{}
	for p := lo; p < lo+8; p++ {
		if p%2 == 1 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		busy[l.Addr().String()] = true
	}
	free := 0 // the odd ports this process has not handed out already
	ports.Lock()
	for p := lo + 1; p < lo+8; p += 2 {
		if ports.held[p] == nil {
			free++
		}
	}
	ports.Unlock()
	got := map[string]bool{}
	for range free {
		addr, err := pick(lo, lo+8)
		if err != nil {
			t.Fatalf("pick with %d of 8 ports free: %v", free, err)
		}
		if busy[addr] || got[addr] {
			t.Fatalf("%s handed out while bound or handed out before", addr)
		}
		got[addr] = true
	}
	if addr, err := pick(lo, lo+8); err == nil {
		t.Fatalf("pick with every port bound or handed out: %s, want an error", addr)
	}
}

func mustFree(t *testing.T) netip.AddrPort {
	t.Helper()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return netip.MustParseAddrPort(addr)
}
