package embedded

import (
	bolt "go.etcd.io/bbolt"
)

// Reads see only durable commits.
//
// bbolt (v1.5.0, Tx.writeMeta) writes a commit's meta page and releases its
// meta lock before the fdatasync that makes the commit durable, so a read
// transaction begun in that window takes the new meta page and reads a
// batch that is not durable yet: one a crash may still take away, or whose
// sync then fails (failedCommit). A reader answering from it (a receipt
// PENDING or COMMITTED, a resource's fence) would tell a caller of state
// that may not exist after a crash.
//
// The store therefore orders its reads against its commits itself, with
// barrier:
//
//   - Every write transaction run while readers may be about (a batch, a
//     step of a journal move, the moves at Close) commits through
//     durableUpdate, which holds barrier's write side from just before
//     Commit until Commit has returned, and records a failed commit
//     (b.failed) before it lets go.
//   - Every read (Store.view) holds the read side only while it checks that
//     no commit has failed and begins its transaction, which is where bbolt
//     takes the snapshot (the meta page) the transaction reads.
//
// A read thus begins before a commit starts (and reads the commit before
// it, which had returned, durable) or after it has returned (durable, or the
// store has failed and the read is refused BACKEND_UNAVAILABLE). A read
// never waits for another read, and waits for a commit only while that
// commit writes and syncs, not while its ops run; a commit waits only for
// the reads that are beginning their transaction, never for a long list.
// Ops read inside their own write transaction, never through view, and the
// barrier is not held while they run, so a batch cannot wait for itself.
// A commit that grows the file (bbolt's remap) waits under the barrier for
// the read transactions already open, which hold no part of it and finish.
// Open runs its transactions with db.Update: no reader exists yet.

// durableUpdate runs fn in a write transaction and, if fn succeeds, commits
// it under the barrier's write side (see above). A commit that fails fails
// the store (failedCommit) before any read can begin after it.
func (b *batcher) durableUpdate(fn func(*bolt.Tx) error) error {
	tx, err := b.db.Begin(true)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // after Commit: ErrTxClosed, nothing done
	if err := fn(tx); err != nil {
		return err
	}
	b.barrier.Lock()
	defer b.barrier.Unlock()
	if err := b.commitTx(tx); err != nil {
		b.failed.CompareAndSwap(nil, &failedCommit{err})
		return err
	}
	return nil
}

// beginRead begins a read transaction on the last durable commit, or
// answers the store's failure. The caller rolls the transaction back.
func (b *batcher) beginRead() (*bolt.Tx, error) {
	if !b.barrier.TryRLock() {
		if f := b.onReadWait; f != nil {
			f()
		}
		b.barrier.RLock()
	}
	defer b.barrier.RUnlock()
	if err := b.failure(); err != nil {
		return nil, err
	}
	return b.db.Begin(false)
}
