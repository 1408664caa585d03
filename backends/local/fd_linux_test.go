package local_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
)

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(entries)
}

// TestHeldFilesAreBoundedAndClosedWithTheStore: the store keeps the files
// it wrote open for the next replace (no open per write), but never more
// than its bound however many keys are written, the writes read back
// whole, and Close releases every descriptor it held.
func TestHeldFilesAreBoundedAndClosedWithTheStore(t *testing.T) {
	before := openFDs(t)
	s, err := local.New("loc", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, bound := local.Held(s)
	keys := int(bound) + 40
	etags := make([]string, keys)
	for i := range keys {
		etags[i] = objecttest.Create(t, s, fmt.Sprintf("k/%d", i), "v1")
	}
	for i := range keys { // replaces: each takes a spare, many of them held files
		if etags[i], err = objecttest.Replace(s, fmt.Sprintf("k/%d", i), etags[i], fmt.Sprintf("v2-%d", i), objecttest.Meta(2)); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := local.Held(s); n > bound {
		t.Fatalf("%d files held open, bound %d", n, bound)
	}
	if n, _ := local.Held(s); n == 0 {
		t.Fatal("no file held open after writes: every replace would open its spare")
	}
	for _, i := range []int{0, keys / 2, keys - 1} {
		if body, info := objecttest.Content(t, s, fmt.Sprintf("k/%d", i)); body != fmt.Sprintf("v2-%d", i) || info.ETag != etags[i] {
			t.Fatalf("k/%d reads %q (%s), want v2-%d (%s)", i, body, info.ETag, i, etags[i])
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _ := local.Held(s); n != 0 {
		t.Fatalf("%d files counted held after Close", n)
	}
	if after := openFDs(t); after > before {
		t.Fatalf("%d descriptors open after Close, %d before New", after, before)
	}
}

// TestAStagingCutShortByCloseReleasesItsDescriptor: a staged write whose
// store closed before its Put or Discard closes its spare's descriptor
// then (the store's Close does not know it).
func TestAStagingCutShortByCloseReleasesItsDescriptor(t *testing.T) {
	openFDs(t) // skips without /proc/self/fd
	dirs := []string{}
	for _, end := range []string{"put", "discard"} {
		dir := t.TempDir()
		dirs = append(dirs, dir)
		s := openAt(t, dir)
		sp := objecttest.Stage(t, s, "k/fd", "v1", objecttest.Meta(1))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if end == "put" {
			_, _ = sp.Put(context.Background(), "", true)
		} else {
			sp.Discard()
		}
	}
	// A descriptor still open into either store's directory is the leak;
	// counting every descriptor of the process was flaky (others close
	// meanwhile: the runtime, an earlier test's server).
	for _, dir := range dirs {
		if held := fdsUnder(t, dir); len(held) > 0 {
			t.Fatalf("descriptors still open after stagings cut short by Close: %v", held)
		}
	}
}

// fdsUnder lists this process's open descriptors whose file is under dir.
func fdsUnder(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			held = append(held, target)
		}
	}
	return held
}
