package local_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
)

func open(t *testing.T) *local.Store {
	t.Helper()
	return openAt(t, t.TempDir())
}

// openAt opens the store "loc" in dir (a reopen, when dir was used before).
func openAt(t *testing.T, dir string) *local.Store {
	t.Helper()
	s, err := local.New("loc", dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	objecttest.Run(t, func(t *testing.T) fencegate.ObjectStore { return open(t) }, objecttest.WithConcurrency(16))
}

func TestRewritingEqualBytesChangesETag(t *testing.T) {
	s := open(t)
	e1 := objecttest.Create(t, s, "k/same", "same bytes")
	e2, err := objecttest.Replace(s, "k/same", e1, "same bytes", objecttest.Meta(1))
	if err != nil {
		t.Fatal(err)
	}
	if e1 == e2 {
		t.Fatalf("rewriting equal bytes kept ETag %s", e1)
	}
}

func TestRecreatedObjectDoesNotMatchOldETag(t *testing.T) {
	s := open(t)
	e1 := objecttest.Create(t, s, "k/aba", "x")
	if err := s.Delete(context.Background(), "k/aba", e1); err != nil {
		t.Fatal(err)
	}
	objecttest.Create(t, s, "k/aba", "x")
	_, err := objecttest.Replace(s, "k/aba", e1, "y", objecttest.Meta(2))
	objecttest.RequirePrecondition(t, err, "If-Match with the ETag of a deleted incarnation")
}

func TestReaderKeepsVersionOpenedBeforeReplace(t *testing.T) {
	s := open(t)
	e1 := objecttest.Create(t, s, "k/r", "old-bytes")
	rc, info, err := s.Get(context.Background(), "k/r")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := objecttest.Replace(s, "k/r", e1, "new", objecttest.Meta(2)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 64)
	n, _ := rc.Read(b)
	if string(b[:n]) != "old-bytes" || info.ETag != e1 {
		t.Fatalf("reader saw %q with ETag %s; want the old version", b[:n], info.ETag)
	}
}

func TestKeysThatAreBothFileAndPrefixCoexist(t *testing.T) {
	s := open(t)
	objecttest.Create(t, s, "a", "1")
	objecttest.Create(t, s, "a/b", "2")
	if got, _ := objecttest.Content(t, s, "a"); got != "1" {
		t.Fatalf("a = %q", got)
	}
}

func TestKeysThatWouldEscapeAreRefused(t *testing.T) {
	s := open(t)
	for _, k := range []string{"../x", "a/../../x", "/abs", "a//b", ""} {
		_, err := s.Put(context.Background(), fencegate.PutRequest{Key: k, Body: strings.NewReader("x"), Size: 1, IfNoneMatch: true})
		objecttest.RequireCode(t, err, fencegate.CodeInvalidRequest, "put of "+k)
	}
}

func TestBodyShorterThanSizeIsInvalidAndWritesNothing(t *testing.T) {
	s := open(t)
	_, err := s.Put(context.Background(), fencegate.PutRequest{Key: "k/short", Body: strings.NewReader("abc"), Size: 10, IfNoneMatch: true})
	objecttest.RequireCode(t, err, fencegate.CodeInvalidRequest, "short body")
	_, err = s.Head(context.Background(), "k/short")
	objecttest.RequireCode(t, err, fencegate.CodeNotFound, "head after short body")
}

func TestObjectsSurviveReopenAndTempFilesAreRemoved(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	etag := objecttest.Create(t, s, "k/p", "persist")
	stale := filepath.Join(dir, "objects", ".tmp-123")
	if err := os.WriteFile(stale, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openAt(t, dir)
	defer s2.Close()
	if body, info := objecttest.Content(t, s2, "k/p"); body != "persist" || info.ETag != etag {
		t.Fatalf("after reopen got %q %s", body, info.ETag)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temp file kept: %v", err)
	}
}

// TestRefusedPutsAndDeletesChangeNothing: a Put or Delete whose context has
// ended is BACKEND_UNAVAILABLE, a Delete without If-Match is INVALID_REQUEST,
// and none of them changes the object (every rejection path changes no state).
func TestRefusedPutsAndDeletesChangeNothing(t *testing.T) {
	s := open(t)
	etag := objecttest.Create(t, s, "k/kept", "old")
	ended, cancel := context.WithCancel(context.Background())
	cancel()

	_, err := s.Put(ended, fencegate.PutRequest{Key: "k/kept", Body: strings.NewReader("new"), Size: 3, IfMatch: etag})
	objecttest.RequireCode(t, err, fencegate.CodeBackendUnavailable, "put with an ended context")
	_, err = s.Put(ended, fencegate.PutRequest{Key: "k/none", Body: strings.NewReader("new"), Size: 3, IfNoneMatch: true})
	objecttest.RequireCode(t, err, fencegate.CodeBackendUnavailable, "create with an ended context")
	err = s.Delete(ended, "k/kept", etag)
	objecttest.RequireCode(t, err, fencegate.CodeBackendUnavailable, "delete with an ended context")
	err = s.Delete(context.Background(), "k/kept", "")
	objecttest.RequireCode(t, err, fencegate.CodeInvalidRequest, "delete without If-Match")

	if got, info := objecttest.Content(t, s, "k/kept"); got != "old" || info.ETag != etag {
		t.Fatalf("k/kept = %q (ETag %s) after refused writes; want %q (ETag %s)", got, info.ETag, "old", etag)
	}
	_, err = s.Head(context.Background(), "k/none")
	objecttest.RequireCode(t, err, fencegate.CodeNotFound, "head of a create refused for its context")
}
