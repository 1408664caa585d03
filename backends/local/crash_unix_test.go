//go:build unix

package local_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
)

// crashTo simulates a power loss that keeps only the directory state of
// durable (name -> inode, as the last successful directory fsync left it)
// while every inode keeps its synced bytes: a new directory where each name
// holds what its inode holds now, wherever it now lives in dir (an inode no
// longer linked is lost: its name is gone).
func crashTo(t *testing.T, dir string, durable map[string]uint64) string {
	t.Helper()
	at := map[uint64]string{}
	entries, err := os.ReadDir(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, "objects", e.Name())
		at[inode(t, p)] = p
	}
	out := t.TempDir()
	if err := os.MkdirAll(filepath.Join(out, "objects"), 0o750); err != nil {
		t.Fatal(err)
	}
	for name, ino := range durable {
		p, ok := at[ino]
		if !ok {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, "objects", name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestReplacedFileIsNotReusedBeforeItsMoveIsDurable: a replace whose
// directory fsync failed may be undone by a crash, bringing the replaced
// file back as the object; so that file must not be reused as a spare (a
// later write, to any key, would overwrite the object a crash brings back).
// After a crash that keeps only what the last successful fsync made
// durable, the key reads its previous version, whole.
func TestReplacedFileIsNotReusedBeforeItsMoveIsDurable(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	e1 := objecttest.Create(t, s, "k/crash", "version-one")
	name := filepath.Base(objectFile(dir, "k/crash"))
	durable := map[string]uint64{name: inode(t, objectFile(dir, "k/crash"))}
	failingDirSync(s) // never healed: nothing after this is durable
	if _, err := objecttest.Replace(s, "k/crash", e1, "version-two", objecttest.Meta(2)); err == nil {
		t.Fatal("replace whose directory fsync failed succeeded")
	}
	for i, key := range []string{"k/other-1", "k/other-2", "k/crash"} { // writes that could take a spare
		_, _ = s.Put(context.Background(), fencegate.PutRequest{Key: key, Body: strings.NewReader("overwritten-" + key),
			Size: int64(len("overwritten-" + key)), IfNoneMatch: i < 2, Meta: objecttest.Meta(3)})
	}
	s.Close()
	s2, err := local.New("loc", crashTo(t, dir, durable))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if body, info := objecttest.Content(t, s2, "k/crash"); body != "version-one" || info.ETag != e1 {
		t.Fatalf("after the crash k/crash reads %q (%s), want version-one (%s)", body, info.ETag, e1)
	}
}
