//go:build unix

package local_test

import (
	"os"
	"syscall"
	"testing"

	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		t.Skip("no inode numbers on this platform")
	}
	return sys.Ino
}

// TestReplaceReusesTheReplacedFile: a replace swaps the new file in and keeps
// the old one as the next write's spare, so rewriting a key allocates no
// file: the third version lives in the first version's inode, and the
// directory holds the object and one spare.
func TestReplaceReusesTheReplacedFile(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	e1 := objecttest.Create(t, s, "k/reuse", "v1")
	first := inode(t, objectFile(dir, "k/reuse"))
	e2, err := objecttest.Replace(s, "k/reuse", e1, "v2", objecttest.Meta(2))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := objecttest.Replace(s, "k/reuse", e2, "v3", objecttest.Meta(3)); err != nil {
		t.Fatal(err)
	}
	if got := inode(t, objectFile(dir, "k/reuse")); got != first {
		// Only a filesystem without RENAME_EXCHANGE excuses it (the store
		// then falls back to a plain rename); CI's has it.
		if os.Getenv("CI") == "" && local.ExchangeUnsupported() {
			t.Skipf("third version in inode %d, first in %d: this filesystem has no RENAME_EXCHANGE", got, first)
		}
		t.Fatalf("third version in inode %d, first in %d: the replaced file was not reused", got, first)
	}
	if body, _ := objecttest.Content(t, s, "k/reuse"); body != "v3" {
		t.Fatalf("after two replaces read %q, want v3", body)
	}
	if n := objectDirFiles(t, dir); n != 2 {
		t.Fatalf("%d files after three writes of one key, want the object and one spare", n)
	}
}
