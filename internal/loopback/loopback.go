// Package loopback hands out loopback addresses for servers a test or a
// benchmark starts as processes of their own, so that a server started (or
// restarted after a kill) on its address does not find it taken.
package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The ports handed out come from below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768–60999 by default), so no outgoing
// connection and no listener on port 0 is ever given one by the kernel. A
// port picked from the ephemeral range was, in one CI run, taken by another
// socket between FreeAddr's check and the gateway's start ("bind: address
// already in use"); a replica restarted on its address after a kill has the
// same window at every restart.
const (
	portLow  = 20000
	portHigh = 32000 // below the default ephemeral range's start, 32768
)

// reserved are ports in [portLow, portHigh) that services on the test
// machines listen on (RabbitMQ's inter-node port).
var reserved = map[int]bool{25672: true}

var ports struct {
	sync.Mutex
	held map[int]*os.File // lock files held until the process exits
}

// FreeAddr returns a loopback address (127.0.0.1:port) for a process the
// caller starts there. The port is outside the kernel's ephemeral range, was
// free when asked, and is never handed out twice: not by this process (a
// set), and not by another of the user's processes using FreeAddr at the same
// time (a lock file per port, held with flock until this process exits, so a
// crashed process leaves nothing held). A port is never released: a server
// restarted later on its address keeps it to itself.
func FreeAddr() (string, error) {
	span := portRange()
	return pick(span[0], span[1])
}

// pick hands out a free port in [lo, hi).
func pick(lo, hi int) (string, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.held == nil {
		ports.held = map[int]*os.File{}
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("fencegate-test-ports-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	for try := 0; try < 500; try++ {
		p := lo + rand.IntN(hi-lo)
		if reserved[p] || ports.held[p] != nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDONLY, 0o600)
		if err != nil {
			return "", err
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			f.Close() // another test process holds it
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			f.Close() // something else listens there
			continue
		}
		l.Close()
		ports.held[p] = f
		return l.Addr().String(), nil
	}
	return "", fmt.Errorf("no free port in [%d, %d) after 500 tries", lo, hi)
}

// portRange is [portLow, portHigh), ending below the ephemeral range's start
// where the machine has moved it lower.
func portRange() [2]int {
	lo, hi := portLow, portHigh
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return [2]int{lo, hi}
	}
	if f := strings.Fields(string(b)); len(f) == 2 {
		if start, err := strconv.Atoi(f[0]); err == nil && start < hi && start > lo+1000 {
			hi = start
		}
	}
	return [2]int{lo, hi}
}
