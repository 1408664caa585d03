package testenv

import (
	"testing"

	"github.com/fencegate/fencegate/internal/loopback"
)

// FreeAddr returns a loopback address (127.0.0.1:port) for a process the test
// starts there: below the kernel's ephemeral range and never handed out twice
// (loopback.FreeAddr). A port is not released at the end of the test: a
// replica restarted later in the run keeps it to itself.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := loopback.FreeAddr()
	if err != nil {
		t.Fatalf("free loopback port: %v", err)
	}
	return addr
}
