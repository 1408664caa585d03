//go:build !linux

package local

import (
	"os"
	"path/filepath"
)

// objDir is the objects directory; without the *at calls here every name
// is joined to its path.
type objDir struct{ path string }

func openObjDir(path string) (*objDir, error) { return &objDir{path: path}, nil }

func (d *objDir) close() error { return nil }

// sync fsyncs the directory: its entries (renames, removes) become durable.
func (d *objDir) sync() error {
	f, err := os.Open(d.path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// exchange renames a over b: without renameat2 there is no atomic swap,
// so the old file is freed and swapped is false.
func (d *objDir) exchange(a, b string) (swapped bool, err error) {
	return false, os.Rename(d.join(a), d.join(b))
}

// renameNew renames a to b (b is missing: checked under the key's lock).
func (d *objDir) renameNew(a, b string) error { return os.Rename(d.join(a), d.join(b)) }

func (d *objDir) remove(name string) error { return os.Remove(d.join(name)) }

// create makes a new empty file under a fresh temp name, open for writing.
func (d *objDir) create() (*wfile, string, error) {
	f, err := os.CreateTemp(d.path, tmpPrefix)
	if err != nil {
		return nil, "", err
	}
	return &wfile{f}, filepath.Base(f.Name()), nil
}

func (d *objDir) openW(name string) (*wfile, error) {
	f, err := os.OpenFile(d.join(name), os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	return &wfile{f}, nil
}

func (d *objDir) openR(name string) (*os.File, error) { return os.Open(d.join(name)) }

func (d *objDir) join(name string) string { return filepath.Join(d.path, name) }

// wfile is an object file open for writing.
type wfile struct{ f *os.File }

func (f *wfile) writeAt(p []byte, off int64) error {
	_, err := f.f.WriteAt(p, off)
	return err
}

func (f *wfile) truncate(n int64) error { return f.f.Truncate(n) }

// datasync makes f's bytes durable (fsync where fdatasync is not offered).
func (f *wfile) datasync() error { return f.f.Sync() }

func (f *wfile) close() error { return f.f.Close() }

// lockDir opens dir/.lock; without flock here nothing refuses a second
// Store on dir (one process, one Store per directory is the caller's rule).
func lockDir(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
}
