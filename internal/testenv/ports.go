package testenv

import (
	"net"
	"testing"
)

// FreeAddr returns a loopback address (127.0.0.1:port) whose port was free
// when asked, for a process the test starts there. Another process may take
// the port first; the test's process then fails to listen, loudly.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}
