package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	gatewayOnce sync.Once
	gatewayBin  string
	gatewayErr  error
)

// GatewayBinary builds cmd/gateway once per test run, as users run it, and
// returns the path of the binary. It sits alone in a temporary directory
// (tests may build other commands beside it) that RemoveBuilt deletes; a
// build failure fails every test that asks.
func GatewayBinary(t testing.TB) string {
	t.Helper()
	gatewayOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fencegate-gateway-")
		if err != nil {
			gatewayErr = err
			return
		}
		gatewayBin = filepath.Join(dir, "gateway")
		out, err := exec.Command("go", "build", "-o", gatewayBin, "github.com/fencegate/fencegate/cmd/gateway").CombinedOutput()
		if err != nil {
			gatewayErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if gatewayErr != nil {
		t.Fatal(gatewayErr)
	}
	return gatewayBin
}

// RemoveBuilt deletes the directory GatewayBinary built into, if it built;
// call it from TestMain after m.Run.
func RemoveBuilt() {
	if gatewayBin != "" {
		_ = os.RemoveAll(filepath.Dir(gatewayBin))
	}
}
