package netfault

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// echo serves loopback connections that send every line back.
func echo(t *testing.T) string {
	t.Helper()
	return testenv.ServeTCP(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if _, err := c.Write([]byte(line)); err != nil {
				return
			}
		}
	})
}

// roundTrip dials addr, sends a line and reads it back.
func roundTrip(addr string) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	took := time.Since(start)
	if err == nil && line != "ping\n" {
		err = fmt.Errorf("echoed %q", line)
	}
	return took, err
}

// ephemeralRange is the kernel's range for ports it picks itself.
func ephemeralRange(t *testing.T) (lo, hi int) {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		t.Fatalf("ip_local_port_range %q: %v", b, err)
	}
	return lo, hi
}

// portOf is addr's port.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestALinkForwardsDelaysCutsAndHeals: a link listens outside the kernel's
// ephemeral range (Heal reopens it there) and forwards to its upstream;
// with Latency a round trip takes at least the delay twice (a lower bound,
// which a slow machine cannot upset); ResetPeers fails a request; Sever
// refuses connections; Heal, after each, forwards as before, on the same
// address; a closed link stays closed whatever Heal does.
func TestALinkForwardsDelaysCutsAndHeals(t *testing.T) {
	l, err := New().Open("echo", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	if lo, hi := ephemeralRange(t); portOf(t, l.Addr()) >= lo && portOf(t, l.Addr()) <= hi {
		t.Fatalf("link on %s, inside the kernel's ephemeral range %d-%d: Heal could find it taken", l.Addr(), lo, hi)
	}
	if _, err := roundTrip(l.Addr()); err != nil {
		t.Fatalf("through a link without faults: %v", err)
	}
	const delay = 30
	if err := l.Latency(delay, 0); err != nil {
		t.Fatal(err)
	}
	if took, err := roundTrip(l.Addr()); err != nil || took < 2*delay*time.Millisecond {
		t.Fatalf("with %d ms latency each way: round trip %v, %v; want at least %d ms", delay, took, err, 2*delay)
	}
	if err := l.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := l.ResetPeers(0); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(l.Addr()); err == nil {
		t.Fatalf("a request through a link resetting its peers was answered")
	}
	if err := l.Heal(); err != nil {
		t.Fatal(err)
	}
	addr := l.Addr()
	l.Sever()
	if _, err := roundTrip(addr); err == nil {
		t.Fatalf("a severed link was answered")
	}
	if err := l.Heal(); err != nil {
		t.Fatal(err)
	}
	if l.Addr() != addr {
		t.Fatalf("healed on %s, want %s", l.Addr(), addr)
	}
	if _, err := roundTrip(addr); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
	l.Sever()
	l.Close()
	if err := l.Heal(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(addr); err == nil {
		t.Fatalf("a closed link was answered after Heal")
	}
}
