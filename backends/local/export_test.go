package local

import "time"

// SetDirSync replaces the directory fsync of s (tests inject failures).
func SetDirSync(s *Store, sync func(dir string) error) { s.dirs.sync = sync }

// Syncs reports the object-file and directory fsyncs s has run.
func Syncs(s *Store) (file, dir uint64) {
	s.dirs.mu.Lock()
	defer s.dirs.mu.Unlock()
	return s.fileSyncs.Load(), s.dirs.syncs
}

// SetLockWait sets how long New waits for another Store's lock (tests
// refuse at once) and returns a func restoring it.
func SetLockWait(d time.Duration) (restore func()) {
	old := lockWait
	lockWait = d
	return func() { lockWait = old }
}

// Held reports the object files s holds open between writes, and the bound.
func Held(s *Store) (n, max int64) { return s.held.Load(), maxHeld }

// SetCloseWait sets how long Close waits for running operations (tests
// only).
func SetCloseWait(d time.Duration) (restore func()) {
	old := closeWait
	closeWait = d
	return func() { closeWait = old }
}

// WithDirSync replaces the store's directory fsync from New on (the
// syncs New itself runs included), as SetDirSync does after it.
func WithDirSync(sync func(dir string) error) Option { return func(s *Store) { s.dirs.sync = sync } }

// SetListWait sets a func called as a List starts to wait for a writer of
// a stripe (tests only; set it before the store is used concurrently).
func SetListWait(s *Store, f func()) { s.onListWait = f }
