package authority

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFileAtomic is durable: the new content is fsynced before it is
// renamed over the file (a crash never leaves the name on an empty file), and
// the directory is fsynced after the rename (a crash never takes the rename
// back once the call returned).
func TestWriteFileAtomicSyncsTheFileBeforeRenameAndTheDirectoryAfter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bundle.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	type call struct{ name, atPath string }
	var calls []call
	saved := fsync
	t.Cleanup(func() { fsync = saved })
	fsync = func(f *os.File) error {
		b, _ := os.ReadFile(path)
		calls = append(calls, call{f.Name(), string(b)})
		return f.Sync()
	}
	if err := WriteFileAtomic(path, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 {
		t.Fatalf("fsync calls: %+v, want the temporary file's then the directory's", calls)
	}
	if c := calls[0]; filepath.Dir(c.name) != dir || c.name == path || c.atPath != "old" {
		t.Fatalf("first fsync %+v: want the temporary file, before the rename", c)
	}
	if c := calls[1]; c.name != dir || c.atPath != "new" {
		t.Fatalf("second fsync %+v: want the directory %s, after the rename", c, dir)
	}
}
