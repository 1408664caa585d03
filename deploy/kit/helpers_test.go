package kit

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// repo is the repository root; deploy is its deploy/ folder.
var (
	repo   = filepath.Join("..", "..")
	deploy = ".."
)

// need finds a tool on PATH; under CI=true its absence fails the test.
func need(t *testing.T, name, install string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found (%s)", name, install)
		}
		t.Skipf("%s not found (%s)", name, install)
	}
	return p
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
