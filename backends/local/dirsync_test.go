package local

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
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
	go func() { first <- d.Sync(0) }()
	<-entered // the first fsync is running

	const n = 5
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = d.Sync(0) }()
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
	go func() { _ = d.Sync(0) }()
	<-entered
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = d.Sync(0) }()
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

// manualTimer replaces d's gathering timer with one the test fires.
func manualTimer(d *dirSyncer) (fire func()) {
	var f func()
	d.after = func(_ time.Duration, fn func()) func() { f = fn; return func() {} }
	return func() {
		d.mu.Lock()
		fn := f
		d.mu.Unlock()
		fn()
	}
}

// waitGathering waits until an fsync is waiting for writers (failing,
// not hanging, if none ever does).
func waitGathering(t *testing.T, d *dirSyncer) {
	t.Helper()
	for range 1_000_000 {
		d.mu.Lock()
		g := d.gathering
		d.mu.Unlock()
		if g {
			return
		}
		runtime.Gosched()
	}
	t.Fatal("no directory fsync waited for the writer that was writing")
}

func noFsyncBegun(t *testing.T, entered chan struct{}, while string) {
	t.Helper()
	select {
	case <-entered:
		t.Fatalf("a directory fsync began %s", while)
	default:
	}
}

// TestSyncWaitsForTheWritersAlreadyWriting: an fsync due while another
// writer's file write is under way (Enter) begins only once that writer
// has renamed, and then covers both: one fsync for the two.
func TestSyncWaitsForTheWritersAlreadyWriting(t *testing.T) {
	d, entered, release := blockingSyncer()
	manualTimer(d)
	w := d.Enter() // writing its file
	first := make(chan error, 1)
	go func() { first <- d.Sync(0) }()
	waitGathering(t, d)
	noFsyncBegun(t, entered, "while a writer was still writing")
	second := make(chan error, 1)
	go func() { second <- d.Sync(w) }() // renamed: asks for the fsync, ending its ticket
	<-entered
	select { // covered by the fsync that has only begun: not answered yet
	case <-first:
		t.Fatal("the first caller returned before the fsync covering it completed")
	case <-second:
		t.Fatal("the gathered writer returned before the fsync covering it completed")
	default:
	}
	release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if d.syncs != 1 || d.gathered != 1 {
		t.Fatalf("%d fsyncs (%d gathered) for a writer and the one it waited for, want 1 (1)", d.syncs, d.gathered)
	}
}

// TestGatherWaitsOnlyForWritersBeforeIt: a writer that starts writing
// after the fsync became due does not hold it back (a stream of new ones
// cannot), and one that leaves without renaming (refused) releases it.
func TestGatherWaitsOnlyForWritersBeforeIt(t *testing.T) {
	d, entered, release := blockingSyncer()
	manualTimer(d)
	w := d.Enter()
	done := make(chan error, 1)
	go func() { done <- d.Sync(0) }()
	waitGathering(t, d)
	late := d.Enter()
	noFsyncBegun(t, entered, "before the earlier writer left")
	d.Leave(w) // refused: no rename
	<-entered  // begins although late is still writing
	release <- nil
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d.Leave(late)
}

// TestGatherIsBounded: a writer that does not reach its rename holds the
// fsync back only until the gathering timer fires.
func TestGatherIsBounded(t *testing.T) {
	d, entered, release := blockingSyncer()
	fire := manualTimer(d)
	w := d.Enter()
	done := make(chan error, 1)
	go func() { done <- d.Sync(0) }()
	waitGathering(t, d)
	noFsyncBegun(t, entered, "before the timer fired")
	fire()
	<-entered
	release <- nil
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	d.Leave(w)
}

// TestLoneWriterDoesNotGather: with nobody else writing, the fsync begins
// at once (no timer set): a single writer's latency is not traded for
// sharing.
func TestLoneWriterDoesNotGather(t *testing.T) {
	d, entered, release := blockingSyncer()
	d.after = func(time.Duration, func()) func() { t.Error("a lone writer set a gathering timer"); return func() {} }
	w := d.Enter()
	done := make(chan error, 1)
	go func() { done <- d.Sync(w) }()
	<-entered
	release <- nil
	if err := <-done; err != nil || d.gathered != 0 {
		t.Fatalf("lone writer: %v, %d gathered", err, d.gathered)
	}
}

// TestFailedSyncIsReportedAlthoughALaterOneSucceeded: a writer that renamed
// while the leader gathered is covered by the leader's fsync, which fails;
// another fsync then runs and succeeds before the writer is woken (one P,
// so the leader's goroutine runs on first). The writer's answer is still
// the failure of the fsync that covered its rename, not the later success:
// its Put must not be reported durable (nor its replaced file reused).
func TestFailedSyncIsReportedAlthoughALaterOneSucceeded(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	fault := errors.New("EIO")
	for range 20 {
		entered, release := make(chan struct{}, 1), make(chan error)
		calls := 0
		d := newDirSyncer("unused", func(string) error {
			calls++
			if calls == 1 {
				entered <- struct{}{}
				return <-release // the covering fsync: held, then failed
			}
			return nil
		})
		manualTimer(d)
		w := d.Enter() // a writer's file write is under way
		leader := make(chan [2]error, 1)
		go func() {
			first := d.Sync(0)  // gathers for w, then runs the failing fsync
			second := d.Sync(0) // runs the next fsync before w's goroutine wakes
			leader <- [2]error{first, second}
		}()
		waitGathering(t, d)
		covered := make(chan error, 1)
		go func() { covered <- d.Sync(w) }()
		<-entered
		release <- fault
		got, werr := <-leader, <-covered
		if !errors.Is(got[0], fault) || got[1] != nil {
			t.Fatalf("leader's fsyncs: %v, %v; want the fault, then success", got[0], got[1])
		}
		if !errors.Is(werr, fault) {
			t.Fatalf("the writer covered by the failed fsync was answered %v (fsyncs run: %d), want the fault", werr, d.syncs)
		}
	}
}
