package local

import (
	"fmt"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
)

// closeWait bounds how long Close waits for operations still running (a
// variable for tests).
var closeWait = 5 * time.Second

// life counts the operations that use the store's descriptors (the open
// objects directory, held and spare files), so that Close never closes one
// an operation still uses. A closed descriptor's number is reused by the
// next open anywhere in the process, so a Put running after Close could
// otherwise fsync some other file in place of the directory and answer
// success for a rename that is not durable. Operations that begin after
// Close are refused.
type life struct {
	mu      sync.Mutex
	closed  bool
	n       int
	drained chan struct{} // closed once closed and n == 0
}

// enter registers an operation; false once the store is closed.
func (l *life) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.n++
	return true
}

// leave ends an operation that entered.
func (l *life) leave() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if l.closed && l.n == 0 {
		close(l.drained)
	}
}

// close refuses new operations and waits up to wait for the running ones.
// first is false when the store was closed before; busy is how many were
// still running when the wait ended (0: none, the descriptors may close).
func (l *life) close(wait time.Duration) (first bool, busy int) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false, 0
	}
	l.closed = true
	l.drained = make(chan struct{})
	if l.n == 0 {
		close(l.drained)
	}
	l.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-l.drained:
		return true, 0
	case <-t.C:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return true, l.n
}

// closedErr is the answer to an operation begun after Close.
func (s *Store) closedErr(what, key string) error {
	return fencegate.Errorf(fencegate.CodeBackendUnavailable, "store %q: %s %q: the store is closed", s.name, what, key)
}

// closeBusy is Close's answer when operations outlived its wait.
func (s *Store) closeBusy(n int) error {
	return fmt.Errorf("store %q: %d operations still running after %s; its files and directory lock stay open until the process exits", s.name, n, closeWait)
}
