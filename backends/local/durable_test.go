package local_test

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
	"github.com/fencegate/fencegate/gateway"
)

// failingDirSync makes every directory fsync of s fail until healed.
func failingDirSync(s *local.Store) (heal func()) {
	var mu sync.Mutex
	failing := true
	local.SetDirSync(s, func(string) error {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return errors.New("EIO: injected directory fsync failure")
		}
		return nil
	})
	return func() { mu.Lock(); failing = false; mu.Unlock() }
}

// TestPutWhoseDirectoryFsyncFailedIsNotCommittedByHeadAlone: the rename is
// visible but may not survive a crash when the directory fsync after it
// fails. The put is UNKNOWN (not COMMITTED because Head sees the object):
// Head answers only once a fresh directory fsync succeeds, and then the
// object it shows is durable.
func TestPutWhoseDirectoryFsyncFailedIsNotCommittedByHeadAlone(t *testing.T) {
	s := open(t)
	heal := failingDirSync(s)
	r := fencegate.Receipt{ID: "rcpt_dur", Resource: "objects/loc/k", Target: "objects/loc/k", FenceToken: 1, Segment: 1,
		OperationRoot: "root", OperationID: "op", PayloadDigest: "d", State: fencegate.ReceiptPending, CreatedAt: time.Now()}
	put := gateway.ObjectPut{Store: s, Key: "k", Body: strings.NewReader("v1"), Size: 2}
	o, err := put.Apply(context.Background(), r, "")
	if o.State != fencegate.ReceiptUnknown || err == nil {
		t.Fatalf("put whose directory fsync failed: %s %v; want UNKNOWN", o.State, err)
	}
	if _, err := s.Head(context.Background(), "k"); err == nil {
		t.Fatal("Head showed an object whose directory entry is not durable")
	}
	if _, _, err := s.List(context.Background(), "", "", 10); err == nil {
		t.Fatal("List answered while the directory is not durable")
	}
	heal()
	info, err := s.Head(context.Background(), "k")
	if err != nil {
		t.Fatalf("Head after the directory fsync succeeded: %v", err)
	}
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); !ok || m.ReceiptID != r.ID {
		t.Fatalf("object after healing: %+v; want the receipt's own", info.Metadata)
	}
	// Reconciling now (the object durable) proves COMMITTED.
	res := gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"loc": s}}
	if o, err := res.Resolve(context.Background(), r); err != nil || o.State != fencegate.ReceiptCommitted {
		t.Fatalf("reconcile after healing: %s %v; want COMMITTED", o.State, err)
	}
}

// TestHeadNeverShowsAReplaceBeforeItsDirectoryFsync: while a replace waits
// for its directory fsync, the new version may not survive a crash, so Head
// of that key does not show it; it answers the new version only once the
// fsync has completed.
func TestHeadNeverShowsAReplaceBeforeItsDirectoryFsync(t *testing.T) {
	s := open(t)
	e1 := objecttest.Create(t, s, "k/h", "v1")
	entered, release := make(chan struct{}), make(chan struct{})
	var released atomic.Bool
	local.SetDirSync(s, func(string) error { close(entered); <-release; return nil })
	put := make(chan error, 1)
	go func() { _, err := objecttest.Replace(s, "k/h", e1, "v2", objecttest.Meta(2)); put <- err }()
	<-entered // renamed, directory fsync running
	type answer struct {
		etag     string
		released bool
	}
	head := make(chan answer, 1)
	go func() {
		info, err := s.Head(context.Background(), "k/h")
		if err != nil {
			t.Error(err)
		}
		head <- answer{info.ETag, released.Load()}
	}()
	var got *answer
	for i := 0; i < 1000 && got == nil; i++ { // give a Head that does not wait every chance to answer
		select {
		case a := <-head:
			got = &a
		default:
			runtime.Gosched()
		}
	}
	released.Store(true)
	close(release)
	if err := <-put; err != nil {
		t.Fatal(err)
	}
	if got == nil {
		a := <-head
		got = &a
	}
	if got.etag != e1 && !got.released {
		t.Fatalf("Head showed the new version %s before its directory fsync completed", got.etag)
	}
}

// blockedInOpen reports whether a goroutine is waiting for a key's lock in
// the store's open (a reader queued behind a writer).
func blockedInOpen() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "(*RWMutex).RLock") && strings.Contains(g, "local.(*Store).openPinned") {
			return true
		}
	}
	return false
}

// TestReaderQueuedBehindAFailedDirectorySyncDoesNotShowTheObject: a Head
// that arrives while a Put waits for its directory fsync, and reads once
// that fsync has failed, must not show the object (it may not survive a
// crash): it answers only after a fresh fsync succeeds. The durability
// check is made under the key's lock, after the writer's result is known.
func TestReaderQueuedBehindAFailedDirectorySyncDoesNotShowTheObject(t *testing.T) {
	s := open(t)
	entered, release := make(chan struct{}, 4), make(chan error)
	var mu sync.Mutex
	blocking := true
	local.SetDirSync(s, func(string) error {
		mu.Lock()
		b := blocking
		mu.Unlock()
		if !b {
			return errors.New("EIO: injected directory fsync failure")
		}
		entered <- struct{}{}
		return <-release
	})
	put := make(chan error, 1)
	go func() {
		_, err := s.Put(context.Background(), fencegate.PutRequest{Key: "k/q", Body: strings.NewReader("v1"), Size: 2, IfNoneMatch: true})
		put <- err
	}()
	<-entered // the Put holds the key's lock in its directory fsync
	head := make(chan error, 1)
	go func() { _, err := s.Head(context.Background(), "k/q"); head <- err }()
	for !blockedInOpen() {
		runtime.Gosched()
	}
	mu.Lock()
	blocking = false // from now on every fsync fails
	mu.Unlock()
	release <- errors.New("EIO: injected directory fsync failure")
	if err := <-put; err == nil {
		t.Fatal("Put whose directory fsync failed succeeded")
	}
	if err := <-head; err == nil {
		t.Fatal("Head queued behind a failed directory fsync showed the object")
	}
}

// TestReopenedStoreMakesWhatItShowsDurableFirst: the rule that Head shows
// only what is durable holds across a process's end. A Put whose directory
// fsync failed leaves its rename visible but not durable; a store opened on
// the directory afterwards (a restarted gateway) fsyncs the objects
// directory, and its parent, before it serves, so the object a Head there
// shows (and a reconciler proves COMMITTED from) survives a power loss. A
// store whose directories cannot be made durable does not open, and leaves
// the directory's lock free.
func TestReopenedStoreMakesWhatItShowsDurableFirst(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	failingDirSync(s)
	r := fencegate.Receipt{ID: "rcpt_reopen", Resource: "objects/loc/k", Target: "objects/loc/k", FenceToken: 1, Segment: 1,
		OperationRoot: "root", OperationID: "op", PayloadDigest: "d", State: fencegate.ReceiptPending, CreatedAt: time.Now()}
	put := gateway.ObjectPut{Store: s, Key: "k", Body: strings.NewReader("v1"), Size: 2}
	if o, err := put.Apply(context.Background(), r, ""); o.State != fencegate.ReceiptUnknown || err == nil {
		t.Fatalf("put whose directory fsync failed: %s %v; want UNKNOWN", o.State, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	failing := local.WithDirSync(func(string) error { return errors.New("EIO: injected directory fsync failure") })
	if _, err := local.New("loc", dir, failing); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("open whose directory fsync fails: %v, want BACKEND_UNAVAILABLE", err)
	}
	var synced []string
	s2, err := local.New("loc", dir, local.WithDirSync(func(path string) error { synced = append(synced, path); return nil }))
	if err != nil { // the lock the failed open took is free again
		t.Fatal(err)
	}
	defer s2.Close()
	if want := []string{filepath.Join(dir, "objects"), dir}; !slices.Equal(synced, want) {
		t.Fatalf("directories synced by the open: %q, want %q", synced, want)
	}
	info, err := s2.Head(context.Background(), "k")
	if err != nil {
		t.Fatalf("Head after the reopen: %v", err)
	}
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); !ok || m.ReceiptID != r.ID {
		t.Fatalf("object after the reopen: %+v; want the receipt's own", info.Metadata)
	}
}
