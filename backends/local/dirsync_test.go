package local

import (
	"errors"
	"runtime"
	"sync"
	"testing"
)

// blockingSyncer is a dirSyncer whose fsyncs wait for a release, counting
// the callers that wait on the syncer.
func blockingSyncer() (d *dirSyncer, entered chan struct{}, release chan error) {
	entered, release = make(chan struct{}, 16), make(chan error)
	d = newDirSyncer("unused", func(string) error { entered <- struct{}{}; return <-release })
	return d, entered, release
}

// TestWritersArrivingDuringASyncShareTheNext: one fsync runs; the callers
// that arrive meanwhile are not covered by it (it may have begun before their
// change) and share the next one; nobody returns before an fsync that began
// after its call has completed.
func TestWritersArrivingDuringASyncShareTheNext(t *testing.T) {
	d, entered, release := blockingSyncer()
	first := make(chan error, 1)
	go func() { first <- d.Sync() }()
	<-entered // the first fsync is running

	const n = 5
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = d.Sync() }()
	}
	for waiting(d) < n {
		runtime.Gosched()
	}
	release <- nil // the first fsync completes: it covers only the first caller
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	<-entered // one second fsync for all five
	release <- nil
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	if d.syncs != 2 {
		t.Fatalf("%d fsyncs for 6 callers in two bursts, want 2", d.syncs)
	}
}

// TestFailedSyncIsReportedToEveryoneItCovers: a failed directory fsync is the
// answer of each caller waiting on it.
func TestFailedSyncIsReportedToEveryoneItCovers(t *testing.T) {
	d, entered, release := blockingSyncer()
	go func() { _ = d.Sync() }()
	<-entered
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = d.Sync() }()
	}
	for waiting(d) < 3 {
		runtime.Gosched()
	}
	release <- nil
	<-entered
	fault := errors.New("EIO")
	release <- fault
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, fault) {
			t.Fatalf("caller %d: %v, want the fsync's error", i, err)
		}
	}
}

// waiting counts the callers parked on d (test only: reads the cond's
// waiters through a counter kept beside it).
func waiting(d *dirSyncer) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.waiters
}
