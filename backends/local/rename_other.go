//go:build !linux

package local

import "os"

// exchange renames a over b: without renameat2 there is no atomic swap,
// so the old file is freed and swapped is false.
func exchange(a, b string) (swapped bool, err error) { return false, os.Rename(a, b) }

// renameNew renames a to b (b is missing: checked under the key's lock).
func renameNew(a, b string) error { return os.Rename(a, b) }

// datasync makes f's bytes durable (fsync where fdatasync is not offered).
func datasync(f *os.File) error { return f.Sync() }
