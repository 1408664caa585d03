//go:build unix

package loopback

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestFreeAddrHandsOutPortsOutsideTheEphemeralRangeOnce: the kernel never
// gives FreeAddr's ports to an outgoing connection or a listener on port 0,
// and no port is handed out twice in a process, so a gateway started (or
// restarted after a kill) on one does not find it taken.
func TestFreeAddrHandsOutPortsOutsideTheEphemeralRangeOnce(t *testing.T) {
	b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	lo, hi, err := portRange(string(b))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint16]bool{}
	for range 200 {
		addr, err := FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		p := netip.MustParseAddrPort(addr).Port()
		if int(p) < lo || int(p) >= hi || reserved[int(p)] {
			t.Fatalf("port %d outside [%d, %d) or reserved", p, lo, hi)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if p := l.Addr().(*net.TCPAddr).Port; p >= lo && p < hi {
		t.Fatalf("the kernel gave port %d, inside FreeAddr's range [%d, %d)", p, lo, hi)
	}
}

// TestPickSkipsPortsBoundLockedOrHandedOut: a port another socket listens on,
// or whose lock file another holder has, is not handed out, nor one handed
// out before; with none left, pick says so.
func TestPickSkipsPortsBoundLockedOrHandedOut(t *testing.T) {
	dir := t.TempDir()
	lo := window(t)
	for p := lo; p < lo+8; p += 2 { // the even ports: bound by another socket
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	locked := lo + 1 // its lock held by another process (another open file: flock conflicts)
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(locked)), os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, p := range []int{lo + 3, lo + 5, lo + 7} {
		want[net.JoinHostPort("127.0.0.1", strconv.Itoa(p))] = true
	}
	for range len(want) {
		addr, err := pick(dir, lo, lo+8)
		if err != nil {
			t.Fatalf("pick with %d ports free: %v", len(want), err)
		}
		if !want[addr] {
			t.Fatalf("%s handed out: bound, locked or handed out before", addr)
		}
		delete(want, addr)
	}
	if addr, err := pick(dir, lo, lo+8); err == nil {
		t.Fatalf("pick with every port bound, locked or handed out: %s, want an error", addr)
	}
}

// window finds 8 ports in FreeAddr's range that nothing listens on and this
// process has not handed out.
func window(t *testing.T) int {
	t.Helper()
	for start := portLow; start+8 <= portHigh; start += 8 {
		ok := true
		for p := start; p < start+8 && ok; p++ {
			ports.Lock()
			_, held := ports.held[p]
			ports.Unlock()
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err == nil {
				l.Close()
			}
			ok = err == nil && !held && !reserved[p]
		}
		if ok {
			return start
		}
	}
	t.Fatal("no 8 free ports in a row")
	return 0
}

// TestPortRangeStaysOutsideTheEphemeralRange: the range picked from, for
// ip_local_port_range's contents.
func TestPortRangeStaysOutsideTheEphemeralRange(t *testing.T) {
	for _, c := range []struct {
		in     string
		lo, hi int
		err    bool
	}{
		{"32768\t60999\n", 20000, 32000, false}, // Linux's default
		{"", 20000, 32000, false},               // no /proc
		{"40000 50000", 20000, 32000, false},    // above the default range
		{"25000 60999", 20000, 25000, false},    // starts inside it: end below
		{"20500 60999", 1024, 20500, false},     // covers it: the larger stretch below
		{"1024 50000", 50001, 65536, false},     // covers it: the stretch above
		{"10000 65535", 1024, 10000, false},
		{"1024 65535", 0, 0, true}, // nothing outside it
	} {
		lo, hi, err := portRange(c.in)
		if (err != nil) != c.err || lo != c.lo || hi != c.hi {
			t.Errorf("portRange(%q) = %d, %d, %v; want %d, %d, error %v", c.in, lo, hi, err, c.lo, c.hi, c.err)
		}
	}
}
