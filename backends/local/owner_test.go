package local_test

import (
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
)

// TestSecondStoreOnADirectoryInUseIsRefused: a Store checks If-Match against
// the ETag it last wrote (kept in memory), so a second Store on the same
// directory (in this process or another) would accept a write chained on a
// version the first has since replaced: a lost update behind the fence. New
// refuses a directory another open Store owns; once that one is closed, the
// directory opens and its ETags hold.
func TestSecondStoreOnADirectoryInUseIsRefused(t *testing.T) {
	defer local.SetLockWait(0)()
	dir := t.TempDir()
	s, err := local.New("loc", dir)
	if err != nil {
		t.Fatal(err)
	}
	e1 := objecttest.Create(t, s, "k/own", "v1")
	if s2, err := local.New("loc", dir); err == nil {
		// Show the hazard the refusal prevents: s2 replaces, then s, which
		// still knows e1, would accept a write chained on it.
		if _, err := objecttest.Replace(s2, "k/own", e1, "v2", objecttest.Meta(2)); err != nil {
			t.Fatal(err)
		}
		_, err := objecttest.Replace(s, "k/own", e1, "lost-update", objecttest.Meta(3))
		t.Fatalf("a second Store opened a directory in use (and the first then took If-Match %s on a replaced version: %v)", e1, err)
	} else {
		objecttest.RequireCode(t, err, fencegate.CodeBackendUnavailable, "second Store on a directory in use")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := local.New("loc", dir)
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	defer s2.Close()
	if _, err := objecttest.Replace(s2, "k/own", e1, "v2", objecttest.Meta(2)); err != nil {
		t.Fatalf("If-Match with the current ETag after reopen: %v", err)
	}
}
