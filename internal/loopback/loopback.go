//go:build unix

// Package loopback hands out loopback addresses for servers a test or a
// benchmark starts as processes of their own, so that a server started (or
// restarted after a kill) on its address does not find it taken.
package loopback

import (
	"errors"
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

// The ports handed out lie outside the kernel's ephemeral range
// (net.ipv4.ip_local_port_range, 32768–60999 by default), so no outgoing
// connection and no listener on port 0 is ever given one by the kernel. A
// port picked from the ephemeral range was, in one CI run, taken by another
// socket between the check and the gateway's start ("bind: address already
// in use"); a replica restarted on its address after a kill has the same
// window at every restart.
const (
	portLow  = 20000
	portHigh = 32000 // below the default ephemeral range's start, 32768
	minSpan  = 1000  // the fewest ports a usable range holds
)

// reserved are ports in the ranges used that services on the test machines
// listen on (RabbitMQ's inter-node port).
var reserved = map[int]bool{25672: true}

var ports struct {
	sync.Mutex
	held map[int]*os.File // lock files held until the process exits (nil: a port handed out without one)
}

// FreeAddr returns a loopback address (127.0.0.1:port) for a process the
// caller starts there. The port is outside the kernel's ephemeral range, was
// free when asked, and is never handed out twice: not by this process (a
// set), and not by another of the user's processes using FreeAddr at the same
// time (a lock file per port, held with flock until this process exits, so a
// crashed process leaves nothing held; where the lock directory cannot be
// used, the set and the listen check alone). A port is never released: a
// server restarted later on its address keeps it to itself.
func FreeAddr() (string, error) {
	b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	lo, hi, err := portRange(string(b))
	if err != nil {
		return "", err
	}
	return pick(lockDir(), lo, hi)
}

// lockDir is the user's directory of port lock files, "" where it cannot be
// used (not created, or not the user's own).
func lockDir() string {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("fencegate-test-ports-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ""
	}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return ""
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
		return ""
	}
	return dir
}

// pick hands out a free port in [lo, hi), locked in dir ("" for no lock).
func pick(dir string, lo, hi int) (string, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.held == nil {
		ports.held = map[int]*os.File{}
	}
	for try := 0; try < 500; try++ {
		p := lo + rand.IntN(hi-lo)
		if reserved[p] {
			continue
		}
		if _, ok := ports.held[p]; ok {
			continue
		}
		var lock *os.File
		if dir != "" {
			f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDONLY, 0o600)
			if err == nil && syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
				f.Close() // another process holds it
				continue
			}
			lock = f // nil if the file could not be opened: the listen check alone
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			if lock != nil {
				lock.Close() // something else listens there
			}
			continue
		}
		l.Close()
		ports.held[p] = lock
		return l.Addr().String(), nil
	}
	return "", fmt.Errorf("no free loopback port in [%d, %d) after 500 tries", lo, hi)
}

// portRange is where ports are picked, given the contents of
// ip_local_port_range ("" where there is none): [portLow, portHigh), ended
// below the ephemeral range's start if that is lower; else, when the
// ephemeral range covers too much of it, the larger of the stretches below
// and above the ephemeral range (from 1024 to 65535); an error if neither
// holds minSpan ports.
func portRange(ephemeral string) (lo, hi int, err error) {
	f := strings.Fields(ephemeral)
	if len(f) != 2 {
		return portLow, portHigh, nil
	}
	eLo, err1 := strconv.Atoi(f[0])
	eHi, err2 := strconv.Atoi(f[1])
	if err := errors.Join(err1, err2); err != nil || eLo > eHi {
		return portLow, portHigh, nil
	}
	switch {
	case eLo >= portHigh || eHi < portLow: // no overlap
		return portLow, portHigh, nil
	case eLo >= portLow+minSpan:
		return portLow, eLo, nil
	}
	below, above := [2]int{1024, eLo}, [2]int{eHi + 1, 65536}
	best := below
	if above[1]-above[0] > below[1]-below[0] {
		best = above
	}
	if best[1]-best[0] < minSpan {
		return 0, 0, fmt.Errorf("the ephemeral port range %d-%d leaves fewer than %d loopback ports outside it", eLo, eHi, minSpan)
	}
	return best[0], best[1], nil
}
