//go:build linux

package local

import (
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// noRenameat2 is set once the filesystem refuses renameat2's flags; the
// plain rename is used from then on.
var noRenameat2 atomic.Bool

// exchange swaps the files at a and b atomically (renameat2
// RENAME_EXCHANGE): b gets a's file and a gets b's old one, so the old
// object stays a file that can be reused. Where the filesystem has no
// exchange it renames a over b (the old file is freed) and reports
// swapped == false.
func exchange(a, b string) (swapped bool, err error) {
	if !noRenameat2.Load() {
		err = unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
		if !unsupported(err) {
			return err == nil, linkError("renameat2", a, b, err)
		}
		noRenameat2.Store(true)
	}
	return false, os.Rename(a, b)
}

// renameNew renames a to b, which must not exist (RENAME_NOREPLACE: the
// kernel refuses to replace a file the store believed missing).
func renameNew(a, b string) error {
	if !noRenameat2.Load() {
		err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE)
		if !unsupported(err) {
			return linkError("renameat2", a, b, err)
		}
		noRenameat2.Store(true)
	}
	return os.Rename(a, b)
}

func unsupported(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.ENOTSUP)
}

func linkError(op, a, b string, err error) error {
	if err == nil {
		return nil
	}
	return &os.LinkError{Op: op, Old: a, New: b, Err: err}
}

// datasync makes f's bytes durable with the metadata needed to read them
// back (size, block map): fdatasync, which skips a timestamp-only inode
// write; when the file's size and blocks did not change (a reused file
// overwritten with as many bytes) it is a data write and a cache flush.
func datasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = unix.Fdatasync(int(fd)); serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if serr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: serr}
	}
	return nil
}

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
