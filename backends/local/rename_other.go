//go:build !linux

package local

import (
	"os"
	"path/filepath"
)

// exchange renames a over b: without renameat2 there is no atomic swap,
// so the old file is freed and swapped is false.
func exchange(a, b string) (swapped bool, err error) { return false, os.Rename(a, b) }

// renameNew renames a to b (b is missing: checked under the key's lock).
func renameNew(a, b string) error { return os.Rename(a, b) }

// datasync makes f's bytes durable (fsync where fdatasync is not offered).
func datasync(f *os.File) error { return f.Sync() }

// lockDir opens dir/.lock; without flock here nothing refuses a second
// Store on dir (one process, one Store per directory is the caller's rule).
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
}
