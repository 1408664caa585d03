//go:build linux

package local

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// noRenameat2 is set once the filesystem refuses renameat2's flags; the
// plain rename is used from then on.
var noRenameat2 atomic.Bool

// objDir is the objects directory, held open from New to Close: every name
// a write creates, opens, renames or removes is resolved relative to it
// (*at calls, no walk of the directory's path), and its fsync needs no open.
// Writes use raw file descriptors: a regular file gains nothing from Go's
// poller, whose registration costs four fcntl calls and an epoll_ctl per
// open.
type objDir struct {
	path string
	fd   int
}

func openObjDir(path string) (*objDir, error) {
	fd, err := retry(func() (int, error) {
		return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &objDir{path: path, fd: fd}, nil
}

func (d *objDir) close() error { return unix.Close(d.fd) }

// sync fsyncs the directory: its entries (renames, removes) become durable.
func (d *objDir) sync() error {
	if _, err := retry(func() (int, error) { return 0, unix.Fsync(d.fd) }); err != nil {
		return &os.PathError{Op: "fsync", Path: d.path, Err: err}
	}
	return nil
}

// exchange swaps the files at names a and b atomically (renameat2
// RENAME_EXCHANGE): b gets a's file and a gets b's old one, so the old
// object stays a file that can be reused. Where the filesystem has no
// exchange it renames a over b (the old file is freed) and reports
// swapped == false.
func (d *objDir) exchange(a, b string) (swapped bool, err error) {
	if !noRenameat2.Load() {
		err = unix.Renameat2(d.fd, a, d.fd, b, unix.RENAME_EXCHANGE)
		if !unsupported(err) {
			return err == nil, d.linkError("renameat2", a, b, err)
		}
		noRenameat2.Store(true)
	}
	return false, d.linkError("renameat", a, b, unix.Renameat(d.fd, a, d.fd, b))
}

// renameNew renames a to b, which must not exist (RENAME_NOREPLACE: the
// kernel refuses to replace a file the store believed missing).
func (d *objDir) renameNew(a, b string) error {
	if !noRenameat2.Load() {
		err := unix.Renameat2(d.fd, a, d.fd, b, unix.RENAME_NOREPLACE)
		if !unsupported(err) {
			return d.linkError("renameat2", a, b, err)
		}
		noRenameat2.Store(true)
	}
	return d.linkError("renameat", a, b, unix.Renameat(d.fd, a, d.fd, b))
}

// remove unlinks name.
func (d *objDir) remove(name string) error {
	if err := unix.Unlinkat(d.fd, name, 0); err != nil {
		return &os.PathError{Op: "unlinkat", Path: filepath.Join(d.path, name), Err: err}
	}
	return nil
}

// create makes a new empty file under a fresh temp name, open for writing.
func (d *objDir) create() (*wfile, string, error) {
	for range 100 {
		var id [8]byte
		_, _ = rand.Read(id[:])
		name := tmpPrefix + hex.EncodeToString(id[:])
		fd, err := retry(func() (int, error) {
			return unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		})
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, "", &os.PathError{Op: "create", Path: filepath.Join(d.path, name), Err: err}
		}
		return &wfile{fd: fd, name: name}, name, nil
	}
	return nil, "", &os.PathError{Op: "create", Path: filepath.Join(d.path, tmpPrefix+"*"), Err: fs.ErrExist}
}

// openW opens the file at name for writing.
func (d *objDir) openW(name string) (*wfile, error) {
	fd, err := retry(func() (int, error) { return unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(d.path, name), Err: err}
	}
	return &wfile{fd: fd, name: name}, nil
}

// openR opens the file at name for reading, as an *os.File (a reader's
// body is read through it).
func (d *objDir) openR(name string) (*os.File, error) {
	fd, err := retry(func() (int, error) { return unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: filepath.Join(d.path, name), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(d.path, name)), nil
}

func (d *objDir) linkError(op, a, b string, err error) error {
	if err == nil {
		return nil
	}
	return &os.LinkError{Op: op, Old: filepath.Join(d.path, a), New: filepath.Join(d.path, b), Err: err}
}

func unsupported(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOTSUP)
}

// retry runs a system call again while it is interrupted (EINTR).
func retry(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != unix.EINTR {
			return n, err
		}
	}
}

// wfile is an object file open for writing: a raw descriptor. name is the
// name it was opened under, for errors only (the file may have moved since).
type wfile struct {
	fd   int
	name string
}

// writeAt writes all of p at off.
func (f *wfile) writeAt(p []byte, off int64) error {
	for len(p) > 0 {
		n, err := retry(func() (int, error) { return unix.Pwrite(f.fd, p, off) })
		if err != nil {
			return &os.PathError{Op: "pwrite", Path: f.name, Err: err}
		}
		if n == 0 {
			return &os.PathError{Op: "pwrite", Path: f.name, Err: unix.EIO}
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

func (f *wfile) truncate(n int64) error {
	if _, err := retry(func() (int, error) { return 0, unix.Ftruncate(f.fd, n) }); err != nil {
		return &os.PathError{Op: "ftruncate", Path: f.name, Err: err}
	}
	return nil
}

// datasync makes f's bytes durable with the metadata needed to read them
// back (size, block map): fdatasync, which skips a timestamp-only inode
// write; when the file's size and blocks did not change (a reused file
// overwritten with as many bytes) it is a data write and a cache flush.
func (f *wfile) datasync() error {
	if _, err := retry(func() (int, error) { return 0, unix.Fdatasync(f.fd) }); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.name, Err: err}
	}
	return nil
}

func (f *wfile) close() error { return unix.Close(f.fd) }

// lockDir takes the exclusive lock that makes a Store the one owner of dir:
// flock on dir/.lock, held until Close (or the process ends). A lock held
// elsewhere is waited for up to lockWait (a process that is exiting), then
// refused.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(lockWait)
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return f, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK) && time.Now().Before(deadline):
			time.Sleep(10 * time.Millisecond)
			continue
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, errInUse
		}
		return nil, err
	}
}
