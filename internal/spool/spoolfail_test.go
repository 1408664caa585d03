package spool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
)

// Rule: a spool file that cannot be written (a full disk) is the gateway's
// INTERNAL, not the client's INVALID_REQUEST, and the failed body leaves no
// file behind. The spool file here is opened read-only, so every write to
// it fails as a full disk's would.
func TestSpoolWriteFailureIsInternalNotTheClients(t *testing.T) {
	defer func(real func(string, string) (*os.File, error)) { createTemp = real }(createTemp)
	createTemp = func(dir, pattern string) (*os.File, error) {
		f, err := os.CreateTemp(dir, pattern)
		if err != nil {
			return nil, err
		}
		name := f.Name()
		f.Close()
		return os.Open(name)
	}
	for _, p := range []*Pool{NewPool(4, 64), nil} { // over the memory bound, and no memory at all
		dir := t.TempDir()
		_, err := p.Read(dir, strings.NewReader("0123456789abc"), -1, 100)
		if fencegate.ErrorCode(err) != fencegate.CodeInternal {
			t.Fatalf("a body whose spool file cannot be written: %v, want INTERNAL", err)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
			t.Fatalf("the failed body left %v", left)
		}
	}
}
