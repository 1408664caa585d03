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
	builtMu  sync.Mutex
	builtDir string
	builds   = map[string]*build{}
)

type build struct {
	once sync.Once
	bin  string
	err  error
}

// GatewayBinary builds cmd/gateway once per test run, as users run it, and
// returns the path of the binary. It sits in a temporary directory (with
// the other commands tests build, FencectlBinary) that RemoveBuilt deletes;
// a build failure fails every test that asks.
func GatewayBinary(t testing.TB) string {
	t.Helper()
	return commandBinary(t, "gateway")
}

// FencectlBinary builds cmd/fencectl once per test run, like GatewayBinary.
func FencectlBinary(t testing.TB) string {
	t.Helper()
	return commandBinary(t, "fencectl")
}

func commandBinary(t testing.TB, name string) string {
	t.Helper()
	builtMu.Lock()
	b := builds[name]
	if b == nil {
		b = &build{}
		builds[name] = b
	}
	if builtDir == "" {
		dir, err := os.MkdirTemp("", "fencegate-gateway-")
		if err != nil {
			builtMu.Unlock()
			t.Fatal(err)
		}
		builtDir = dir
	}
	dir := builtDir
	builtMu.Unlock()
	b.once.Do(func() {
		b.bin = filepath.Join(dir, name)
		out, err := exec.Command("go", "build", "-o", b.bin, "github.com/fencegate/fencegate/cmd/"+name).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// RemoveBuilt deletes the directory the binaries were built into, if any;
// call it from TestMain after m.Run.
func RemoveBuilt() {
	builtMu.Lock()
	defer builtMu.Unlock()
	if builtDir != "" {
		_ = os.RemoveAll(builtDir)
	}
}
