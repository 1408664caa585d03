package local

import (
	"sync"
	"time"
)

// dirSyncer makes the entries changed in one directory durable, sharing
// fsyncs between concurrent writers (group commit for directory syncs).
//
// A caller needs an fsync of the directory that starts after its own change
// (a rename or a remove). When none is running it starts one; when one is
// already running, that one may have started before the change, so the
// caller waits for the next one, which it shares with everyone else who
// arrived meanwhile. A caller therefore returns only after an fsync that
// began after its change has completed: the same guarantee as an fsync of
// its own, at one or two fsyncs per burst of writers instead of one each.
//
// Gathering: writers that are about to rename (their small file's write
// and fdatasync under way: Enter) are waited for before an fsync begins,
// for at most maxGather, so that one fsync covers their renames too
// instead of each starting the next. Only the writers already writing
// when the fsync is due are waited for (a steady stream of new ones cannot
// hold it back), and with none writing it begins at once: a lone writer
// never waits. Waiting only moves the fsync's start later; what it covers
// is still decided by when it begins.
type dirSyncer struct {
	dir       string
	sync      func(dir string) error
	maxGather time.Duration                             // 0: never wait for writers
	after     func(time.Duration, func()) (stop func()) // time.AfterFunc; tests inject

	mu      sync.Mutex
	cond    *sync.Cond
	running bool   // an fsync is being gathered or run
	started uint64 // fsyncs begun
	done    uint64 // the last fsync that has completed
	err     error  // its result
	// failed and failErr: the last fsync that failed and its error, so
	// that every caller an fsync covered learns of its failure even when a
	// later one has succeeded before the caller is woken.
	failed  uint64
	failErr error
	// unsynced: the last fsync failed, so a change seen in the directory
	// (a renamed object, a removed one) may not survive a crash.
	unsynced bool
	tickets  uint64              // the last ticket Enter handed out
	writing  map[uint64]struct{} // tickets of the writers between Enter and their rename
	// gathering: the leader waits for writers (Leave and Sync wake it).
	gathering bool

	syncs    uint64 // fsyncs run, for tests and measurements
	gathered uint64 // fsyncs that waited for writers first, for tests and measurements
	waiters  int    // callers waiting for the next fsync, for tests
}

// defaultGather bounds how long an fsync waits for the writers whose file
// sync is under way: about one small fdatasync.
const defaultGather = 500 * time.Microsecond

// newDirSyncer shares the fsyncs of dir that syncFn runs.
func newDirSyncer(dir string, syncFn func(dir string) error) *dirSyncer {
	d := &dirSyncer{dir: dir, sync: syncFn, maxGather: defaultGather, writing: map[uint64]struct{}{},
		after: func(t time.Duration, f func()) func() { tm := time.AfterFunc(t, f); return func() { tm.Stop() } }}
	d.cond = sync.NewCond(&d.mu)
	return d
}

// Enter registers a writer that has started the write and file sync
// before its rename; it passes the ticket to Sync after the rename, or to
// Leave if it will not rename (or may wait long before it does).
func (d *dirSyncer) Enter() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tickets++
	d.writing[d.tickets] = struct{}{}
	return d.tickets
}

// Leave ends ticket t (0: none) without a rename to sync.
func (d *dirSyncer) Leave(t uint64) {
	if t == 0 {
		return
	}
	d.mu.Lock()
	d.leave(t)
	d.mu.Unlock()
}

func (d *dirSyncer) leave(t uint64) {
	delete(d.writing, t)
	if d.gathering {
		d.cond.Broadcast()
	}
}

// Sync returns once a directory fsync that began after the call has
// completed, with that fsync's error. t is the caller's ticket from Enter
// (0: none), ended here: in the same step as the caller asks for an fsync,
// so a leader gathering for it never begins the fsync between the two.
func (d *dirSyncer) Sync(t uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t != 0 {
		d.leave(t)
	}
	need := d.started + 1 // the first fsync to begin from now on
	for d.done < need {
		if d.running {
			d.waiters++
			d.cond.Wait()
			d.waiters--
			continue
		}
		d.running = true
		d.gather()
		d.started++
		gen := d.started
		d.syncs++
		d.mu.Unlock()
		err := d.sync(d.dir)
		d.mu.Lock()
		d.running, d.done, d.err, d.unsynced = false, gen, err, err != nil
		if err != nil {
			d.failed, d.failErr = gen, err
		}
		d.cond.Broadcast()
	}
	// Any fsync that began after the change covers it, and a failure of
	// any of them (need up to done) is the answer, even if another covering
	// the change succeeded before or after it: never claim more than is
	// known.
	if d.failed >= need {
		return d.failErr
	}
	return nil
}

// gather waits, under d.mu, until the writers writing now have renamed or
// left, or maxGather has passed.
func (d *dirSyncer) gather() {
	upTo := d.tickets
	if d.maxGather <= 0 || !d.writingUpTo(upTo) {
		return
	}
	d.gathered++
	expired := false
	stop := d.after(d.maxGather, func() {
		d.mu.Lock()
		expired = true
		d.cond.Broadcast()
		d.mu.Unlock()
	})
	d.gathering = true
	for !expired && d.writingUpTo(upTo) {
		d.cond.Wait()
	}
	d.gathering = false
	stop()
}

// writingUpTo reports whether a writer with a ticket up to upTo is writing.
func (d *dirSyncer) writingUpTo(upTo uint64) bool {
	for t := range d.writing {
		if t <= upTo {
			return true
		}
	}
	return false
}

// Durable returns nil when what the directory shows is durable: the last
// fsync succeeded, or (after a failed one) a fresh fsync does now. A reader
// that must not report a change that may be lost in a crash (Head after a
// put whose directory fsync failed) asks it first. Linux may report a
// later fsync as successful although the writeback behind an earlier
// failure was lost; a filesystem that loses directory metadata that way
// usually aborts its journal, and every later write fails.
func (d *dirSyncer) Durable() error {
	d.mu.Lock()
	unsynced := d.unsynced
	d.mu.Unlock()
	if !unsynced {
		return nil
	}
	return d.Sync(0)
}
