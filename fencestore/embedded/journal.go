package embedded

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The journal (layout 5).
//
// A B+tree's depth grows with what it holds, and a commit rewrites every
// page on the path from each changed leaf to its root, so with a million
// receipts each write to the big trees (resources, receipts and their
// indexes, versions) costs a branch level more per tree, and its pages lie
// far apart in a large file. Each of those trees therefore has a small
// companion, its journal bucket ("j." and the tree's name), that takes every
// write: a new or rewritten key goes into the journal, a deleted key is
// deleted from both. A read looks in the journal first and then in the big
// tree, so the journal's entry, the newer, wins; a list walks both in key
// order (cursor). Every 8192 ops (WithJournalMoves) the committer moves the
// journal into the big trees, in steps of its own between batches
// (maybeMerge; Open and Close use moveJournal), so the journal stays a small
// tree (two or three levels for 8192 ops of small receipts) and a move
// writes each big tree's pages once for thousands of writes: time-ordered
// keys (receipts, by-state) land on the big tree's last leaves together, and
// the keys of each resource and operation being written (resources, byres,
// versions, byop) once each however often they were written since the last
// move. With writes spread over many resources a move writes a leaf path per
// resource, in each of resources, byres and versions.
//
// Nothing here weakens a commit: the journal is in the same file and the
// same transactions, each entry leaves the journal in the transaction that
// puts it in its big tree, and a read sees the same state whichever side
// holds a key, so a move may stop after any of its transactions. Open moves
// whatever a crash left in the journal before anything else runs, and Close
// moves it all, so a file closed cleanly holds nothing in its journal.

// journaled are the trees that take their writes through a journal bucket.
var journaled = [][]byte{bResources, bReceipts, bByOp, bByRes, bByState, bVersions}

// journalOf names the journal bucket of each journaled tree.
var journalOf = func() map[string][]byte {
	m := make(map[string][]byte, len(journaled))
	for _, name := range journaled {
		m[string(name)] = append([]byte("j."), name...)
	}
	return m
}()

// defaultJournalMoves is how many committed ops the committer lets into the
// journal before it moves it, unless WithJournalMoves says otherwise.
const defaultJournalMoves = 8192

// Option tunes a Store at Open.
type Option func(*Store)

// WithJournalMoves sets how many committed ops the store lets into its
// journal before moving it into the big trees (journal.go; default 8192, at
// least 1). Fewer moves write the big trees less often, with a larger
// journal to read beside them; the simulation moves it every few ops to
// exercise both sides.
func WithJournalMoves(ops uint64) Option {
	return func(s *Store) { s.batch.mergeEvery.Store(max(ops, 1)) }
}

// tree is a journaled tree in one transaction: its journal (hot) and the
// big tree (cold).
type tree struct{ hot, cold *bolt.Bucket }

// treeOf returns the journaled tree name in tx.
func treeOf(tx *bolt.Tx, name []byte) tree {
	return tree{hot: tx.Bucket(journalOf[string(name)]), cold: tx.Bucket(name)}
}

// Get returns the value of key: the journal's if it holds the key, else the
// big tree's.
func (t tree) Get(key []byte) []byte {
	if v := t.hot.Get(key); v != nil {
		return v
	}
	return t.cold.Get(key)
}

// Put writes key into the journal.
func (t tree) Put(key, value []byte) error { return t.hot.Put(key, value) }

// Delete deletes key from both sides (a key not in the big tree writes no page
// of it: bbolt changes nothing for a key it does not find).
func (t tree) Delete(key []byte) error {
	for _, side := range []*bolt.Bucket{t.hot, t.cold} {
		if err := side.Delete(key); err != nil {
			return err
		}
	}
	return nil
}

// ForEach calls fn for every key in key order, with the newer value of a key
// on both sides.
func (t tree) ForEach(fn func(k, v []byte) error) error {
	c := t.Cursor()
	for k, v := c.Seek(nil); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// Cursor returns a forward cursor over both sides of t.
func (t tree) Cursor() *cursor { return &cursor{h: t.hot.Cursor(), c: t.cold.Cursor()} }

// cursor walks a journaled tree forward in key order: the smaller of the two
// sides' keys next, and for a key on both sides the journal's value.
type cursor struct {
	h, c           *bolt.Cursor
	hk, hv, ck, cv []byte
	hotNext        bool // the last key returned came from the journal
	coldNext       bool // ... from the big tree (both for a key on both sides)
}

// Seek moves to the first key at or after seek and returns it (nil at the end).
func (c *cursor) Seek(seek []byte) (key, value []byte) {
	c.hk, c.hv = c.h.Seek(seek)
	c.ck, c.cv = c.c.Seek(seek)
	return c.pick()
}

// Next moves to the next key and returns it (nil at the end).
func (c *cursor) Next() (key, value []byte) {
	if c.hotNext {
		c.hk, c.hv = c.h.Next()
	}
	if c.coldNext {
		c.ck, c.cv = c.c.Next()
	}
	return c.pick()
}

func (c *cursor) pick() (key, value []byte) {
	c.hotNext, c.coldNext = false, false
	switch {
	case c.hk == nil && c.ck == nil:
		return nil, nil
	case c.ck == nil:
		c.hotNext = true
		return c.hk, c.hv
	case c.hk == nil:
		c.coldNext = true
		return c.ck, c.cv
	}
	switch cmp := bytes.Compare(c.hk, c.ck); {
	case cmp < 0:
		c.hotNext = true
		return c.hk, c.hv
	case cmp > 0:
		c.coldNext = true
		return c.ck, c.cv
	default:
		c.hotNext, c.coldNext = true, true
		return c.hk, c.hv
	}
}

// createJournal makes the journal buckets a file lacks.
func createJournal(tx *bolt.Tx) error {
	for _, name := range journaled {
		if _, err := tx.CreateBucketIfNotExists(journalOf[string(name)]); err != nil {
			return err
		}
	}
	return nil
}

// journalEmpty reports whether every journal bucket of tx is empty.
func journalEmpty(tx *bolt.Tx) bool {
	for _, name := range journaled {
		if k, _ := tx.Bucket(journalOf[string(name)]).Cursor().First(); k != nil {
			return false
		}
	}
	return true
}

// moveBudget bounds the bytes (keys and values) one move transaction at
// Open or Close copies (give or take the last entry), so that moving a
// journal of large receipts (a kept API request may hold a megabyte) never
// holds more than this in memory at once; moveStep bounds one step of the
// committer's moves, which writers wait for.
const (
	moveBudget = 16 << 20
	moveStep   = 1 << 20
)

// mergeJournal moves journal entries into their big trees, in key order,
// until it has copied budget bytes (at least one entry); a journal bucket
// moved whole is dropped and made again (its pages freed whole). It returns
// the number of entries moved and whether the journal is now empty. Moving
// part of the journal is as consistent as moving all of it: each entry
// leaves the journal in the transaction that puts it in its big tree.
func mergeJournal(tx *bolt.Tx, budget int) (n int, empty bool, err error) {
	fillAppendBuckets(tx)
	size := 0
	for _, name := range journaled {
		jname := journalOf[string(name)]
		hot, cold := tx.Bucket(jname), tx.Bucket(name)
		var moved [][]byte
		c := hot.Cursor()
		k, v := c.First()
		if k == nil {
			continue
		}
		for ; k != nil && (size < budget || n == 0); k, v = c.Next() {
			// Copies: the journal's pages are freed below, in this transaction.
			kc := bytes.Clone(k)
			if err := cold.Put(kc, bytes.Clone(v)); err != nil {
				return n, false, fmt.Errorf("move journal %s: %w", jname, err)
			}
			moved = append(moved, kc)
			size += len(k) + len(v)
			n++
		}
		if k != nil { // the budget is spent: what was moved leaves the journal
			for _, k := range moved {
				if err := hot.Delete(k); err != nil {
					return n, false, err
				}
			}
			return n, false, nil
		}
		if err := tx.DeleteBucket(jname); err != nil {
			return n, false, err
		}
		if _, err := tx.CreateBucket(jname); err != nil {
			return n, false, err
		}
	}
	return n, true, nil
}

// moveJournal moves the journal of db in transactions of at most budget
// bytes each (mergeJournal), run by update (db.Update; the committer's hook
// in tests), until it is empty or after limit transactions (0: no limit).
// It returns how many it ran (none for an empty journal: a write
// transaction costs a commit even when it changes nothing) and whether the
// journal is empty. committing is true when err came from a transaction's
// commit (which may have reached the page cache: see Group commit in
// batch.go), false when a step refused before it (rolled back).
func moveJournal(db *bolt.DB, update func(func(*bolt.Tx) error) error, budget, limit int) (txs int, empty, committing bool, err error) {
	if err := db.View(func(tx *bolt.Tx) error { empty = journalEmpty(tx); return nil }); err != nil {
		return 0, false, false, err
	}
	for !empty && (limit == 0 || txs < limit) {
		txs++
		var stepErr error
		err := update(func(tx *bolt.Tx) error {
			_, empty, stepErr = mergeJournal(tx, budget)
			return stepErr
		})
		if err != nil {
			return txs, false, stepErr == nil, err
		}
	}
	return txs, empty, false, nil
}
