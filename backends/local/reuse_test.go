package local_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
)

func objectFile(dir, key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(dir, "objects", hex.EncodeToString(sum[:]))
}

// TestReaderKeepsVersionAcrossTwoReplaces: the file a Get holds open is
// never reused, however many replaces follow while it reads.
func TestReaderKeepsVersionAcrossTwoReplaces(t *testing.T) {
	s := open(t)
	etag := objecttest.Create(t, s, "k/pin", "the-old-version")
	rc, _, err := s.Get(context.Background(), "k/pin")
	if err != nil {
		t.Fatal(err)
	}
	for i, body := range []string{"second-version!", "third-version!!", "fourth-version!"} {
		if etag, err = objecttest.Replace(s, "k/pin", etag, body, objecttest.Meta(uint64(i+2))); err != nil {
			t.Fatal(err)
		}
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "the-old-version" {
		t.Fatalf("reader opened before three replaces read %q (%v), want the-old-version", b, err)
	}
	// Once closed, replaces go on and read back whole.
	if _, err := objecttest.Replace(s, "k/pin", etag, "fifth", objecttest.Meta(9)); err != nil {
		t.Fatal(err)
	}
	if body, _ := objecttest.Content(t, s, "k/pin"); body != "fifth" {
		t.Fatalf("read %q, want fifth", body)
	}
}

// TestBodiesOfEverySizeRoundTripThroughReusedFiles: a key rewritten with
// bodies around the in-memory threshold and the spare-length limit, larger
// and smaller than the file each reuses, reads back exactly each time.
func TestBodiesOfEverySizeRoundTripThroughReusedFiles(t *testing.T) {
	s := open(t)
	etag := objecttest.Create(t, s, "k/sizes", "")
	for i, n := range []int{1, 1024, 64 << 10, 64<<10 + 1, 200 << 10, 3, 2<<20 + 5, 1000, 0, 999} {
		body := strings.Repeat(string(rune('a'+i)), n)
		var err error
		if etag, err = objecttest.Replace(s, "k/sizes", etag, body, objecttest.Meta(uint64(i+2))); err != nil {
			t.Fatalf("replace with %d bytes: %v", n, err)
		}
		got, info := objecttest.Content(t, s, "k/sizes")
		if got != body || info.Size != int64(n) || info.ETag != etag {
			t.Fatalf("after writing %d bytes read %d (size %d, ETag %s want %s)", n, len(got), info.Size, info.ETag, etag)
		}
	}
}

// TestTimeWrittenTravelsWithTheObject: LastModified is the store clock's
// time of the write, kept in the trailer (a reused file's mtime and an
// fdatasync'd one's are no record of it).
func TestTimeWrittenTravelsWithTheObject(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	s, err := local.New("loc", t.TempDir(), local.WithClock(func() time.Time { return at }))
	if err != nil {
		t.Fatal(err)
	}
	objecttest.Create(t, s, "k/t", "x")
	info, err := s.Head(context.Background(), "k/t")
	if err != nil || !info.LastModified.Equal(at) {
		t.Fatalf("LastModified %v (%v), want %v", info.LastModified, err, at)
	}
}

// TestObjectWrittenByAnEarlierVersionIsReadAndReplaced: a file in the
// earlier trailer format (no time written, no padding) reads back with its
// mtime as LastModified, its ETag holds for If-Match after a restart, and a
// stale ETag does not.
func TestObjectWrittenByAnEarlierVersionIsReadAndReplaced(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "objects"), 0o750); err != nil {
		t.Fatal(err)
	}
	etag := `"` + strings.Repeat("ab", 32) + `-0011223344556677"`
	tr, _ := json.Marshal(map[string]any{"key": "k/old", "etag": etag, "size": 3, "content_type": "text/plain",
		"metadata": objecttest.Meta(1).Map()})
	file := append([]byte("old"), tr...)
	file = binary.BigEndian.AppendUint32(file, uint32(len(tr)))
	file = append(file, "FGO1"...)
	if err := os.WriteFile(objectFile(dir, "k/old"), file, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openAt(t, dir)
	body, info := objecttest.Content(t, s, "k/old")
	if body != "old" || info.ETag != etag || info.LastModified.IsZero() {
		t.Fatalf("earlier-format object read as %q %+v", body, info)
	}
	_, err := objecttest.Replace(s, "k/old", `"`+strings.Repeat("cd", 32)+`-0011223344556677"`, "new", objecttest.Meta(2))
	objecttest.RequirePrecondition(t, err, "If-Match with a stale ETag on an earlier-format object")
	if _, err := objecttest.Replace(s, "k/old", etag, "new", objecttest.Meta(2)); err != nil {
		t.Fatalf("If-Match with the earlier-format object's ETag: %v", err)
	}
	if body, _ := objecttest.Content(t, s, "k/old"); body != "new" {
		t.Fatalf("read %q after replacing, want new", body)
	}
}

// TestETagsHoldAcrossReopen: a reopened store knows nothing in memory; it
// checks conditions against the files (current ETag holds, replaced one
// does not) and removes the spares the previous one kept.
func TestETagsHoldAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	e1 := objecttest.Create(t, s, "k/re", "v1")
	e2, err := objecttest.Replace(s, "k/re", e1, "v2", objecttest.Meta(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openAt(t, dir)
	defer s2.Close()
	if n := objectDirFiles(t, dir); n != 1 {
		t.Fatalf("%d files after reopen, want the object alone (spares removed)", n)
	}
	_, err = objecttest.Replace(s2, "k/re", e1, "stale", objecttest.Meta(3))
	objecttest.RequirePrecondition(t, err, "If-Match with the replaced ETag after reopen")
	_, err = s2.Put(context.Background(), fencegate.PutRequest{Key: "k/re", Body: bytes.NewReader([]byte("x")), Size: 1, IfNoneMatch: true, Meta: objecttest.Meta(3)})
	objecttest.RequirePrecondition(t, err, "If-None-Match on an existing key after reopen")
	if _, err := objecttest.Replace(s2, "k/re", e2, "v3", objecttest.Meta(3)); err != nil {
		t.Fatalf("If-Match with the current ETag after reopen: %v", err)
	}
}

// objectDirFiles counts the files in dir/objects other than the store's lock.
func objectDirFiles(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.Name() != ".lock" {
			n++
		}
	}
	return n
}
