package local

import "sync"

// dirSyncer makes the entries changed in one directory durable, sharing
// fsyncs between concurrent writers (group commit for directory syncs).
//
// A caller needs an fsync of the directory that starts after its own change
// (a rename or a remove). When none is running it starts one at once; when
// one is already running, that one may have started before the change, so
// the caller waits for the next one, which it shares with everyone else who
// arrived meanwhile. A caller therefore returns only after an fsync that
// began after its change has completed: the same guarantee as an fsync of
// its own, at one or two fsyncs per burst of writers instead of one each.
type dirSyncer struct {
	dir  string
	sync func(dir string) error

	mu      sync.Mutex
	cond    *sync.Cond
	running bool
	started uint64 // fsyncs begun
	done    uint64 // the last fsync that has completed
	err     error  // its result
	// unsynced: the last fsync failed, so a change seen in the directory
	// (a renamed object, a removed one) may not survive a crash.
	unsynced bool

	syncs   uint64 // fsyncs run, for tests and measurements
	waiters int    // callers waiting for the next fsync, for tests
}

// newDirSyncer shares the fsyncs of dir that syncFn runs.
func newDirSyncer(dir string, syncFn func(dir string) error) *dirSyncer {
	d := &dirSyncer{dir: dir, sync: syncFn}
	d.cond = sync.NewCond(&d.mu)
	return d
}

// Sync returns once a directory fsync that began after the call has
// completed, with that fsync's error.
func (d *dirSyncer) Sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	need := d.started + 1 // the first fsync to begin from now on
	for d.done < need {
		if d.running {
			d.waiters++
			d.cond.Wait()
			d.waiters--
			continue
		}
		d.running = true
		d.started++
		gen := d.started
		d.syncs++
		d.mu.Unlock()
		err := d.sync(d.dir)
		d.mu.Lock()
		d.running, d.done, d.err, d.unsynced = false, gen, err, err != nil
		d.cond.Broadcast()
	}
	// Any fsync that began after the change covers it; the latest one's
	// result is the answer (a failure is reported even if an earlier one
	// covering the change succeeded: never claim more than is known).
	return d.err
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
	return d.Sync()
}
