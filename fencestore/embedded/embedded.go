// Package embedded is a fencegate.FenceStore in one local file, on
// go.etcd.io/bbolt: no server, for the gateway's single-node and dev modes.
//
// # Why there is no locking here
//
// bbolt admits one read-write transaction at a time for the whole file (a
// writer holds the database's writer lock from Begin to Commit) and each
// transaction sees a consistent snapshot, so read-write transactions are
// serializable. Every write (Admit, Settle, SwapVersion, Unbind) is one op
// that reads what it needs, applies the rules of package fencerules and writes
// the receipt, the indexes and the new resource state. Ops run one after
// another inside a write transaction, so no other op can interleave with one
// and no per-resource mutex is needed; a refused op writes nothing. Readers
// read a snapshot and never block the writer's ops; they begin only on a
// commit that is durable (durable.go: bbolt would show one before its sync). An Admit carrying a folded settle
// (AdmitRequest.Prior, fencegate.PriorSettling) is one op as well: the settle,
// then the admission decided on what it left, so both share one commit and
// neither is durable without the other.
//
// Concurrent ops share one transaction (group commit, see batch.go): the
// ops queued while a commit is in flight are run together in the next one,
// and each caller is answered after that commit has fsynced, so an admitted
// segment (and a settled receipt) survives a crash before its call returns.
// An op that fails in a way that may have left part of its writes is taken
// out and run alone; the others run again without it. The price is that all
// resources share one writer; that is the right trade for one process, and
// the Postgres store is the one to use when several gateways share fence
// state.
//
// bbolt holds an exclusive file lock while the file is open: a second process
// (or a second Open in this one) waits up to OpenTimeout and then fails, rather
// than corrupting the file.
//
// # Layout
//
// Receipts and resource states are kept in a compact binary form
// (codec.go), which also reads the JSON that files written before it hold;
// other values are JSON. Keys join their parts with a 0x00 byte, which no canonical
// name contains (fencegate.CheckName refuses control characters); numbers are
// big-endian; times are Unix seconds with the sign bit flipped followed by the
// nanoseconds, so that byte order is time order.
//
//	resources   resource                            -> ResourceState
//	receipts    receipt ID                          -> Receipt
//	byop        operation ID 0 createdAt receipt ID -> receipt ID
//	byres       resource 0 createdAt receipt ID     -> receipt ID
//	            resource 1 ^fence ^segment          -> receipt ID (live receipts only)
//	bystate     state 0 createdAt receipt ID        -> receipt ID
//	quarantine  resource 0 at quarantine ID         -> Quarantine
//	qids        quarantine ID                       -> its quarantine key
//	qreceipts   receipt ID 0 quarantine key         -> "" (a receipt a record names; qindex.go)
//	qlast       lastAt quarantine key               -> quarantine ID 0 receipt ID (qretain.go)
//	versions    target                              -> version
//	targets     target                              -> resource it is fenced under
//	meta        "layout"                            -> layout version (big-endian uint64)
//	j.resources, j.receipts, j.byop, j.byres, j.bystate, j.versions:
//	            the journal of each tree (journal.go), same keys and values
//
// Layout 2 added byres; Open fills it from receipts for a file of layout 1.
// Layout 3 keys quarantine records by their ID, one per distinct refused
// request, with qids to find them; Open re-keys older records, merging
// repeats into one with their count as Attempts.
// Layout 4 keeps the live index in byres, each resource's entries right after
// its by-resource entries, newest segment first (^ is the bitwise complement),
// so that the two entries an admission adds are neighbours and share a leaf
// page (one page written per resource instead of two, with their branches);
// Open moves the entries of the former live bucket there and drops it.
// Lists seek their index to the cursor's key, so a page costs its own size.
// Layout 5 adds the journal: writes to the trees that grow with the store go
// into small journal buckets, moved into the trees in bulk, so that a write's
// cost does not grow with the store (journal.go); Open makes the buckets.
// qreceipts and qlast are outside the layout numbers: Open rebuilds them
// whenever they lack a record's entry (qindex.go), so older binaries may open
// the file.
//
// # Older binaries
//
// Open refuses a file of a newer layout than its own, so a binary of layout
// 4 does not open a file of layout 5 (its journal would be invisible to it),
// except those built from 2bdd345 (layout 4) up to, not including, 7e00f0b
// (the refusal), which open it as their own: like binaries of layout 3 and
// older, they must not be run on a file a crash left with writes in its
// journal, and unlike those they leave no trace Open could find (no live
// bucket). Binaries of layout 3 and older did not refuse. Close moves the
// whole journal into the trees, so on a file closed cleanly they see
// everything, as below; on one a crash left with writes in its journal they
// would run on stale fence state, and a file they have used that way is
// refused by Open (their live bucket and a non-empty journal together), and
// not repaired (README, Known limitations, says what an operator can do).
// One of them opening a layout 4 or 5 file (a rollback) runs on it without
// its live index (it makes an empty live bucket and keeps the receipts it
// admits there), so a retry of a segment admitted before the rollback is
// refused (SEGMENT_OUT_OF_ORDER or RESOURCE_BUSY) instead of replayed, and
// another payload for it is refused without a quarantine record; nothing is
// admitted twice. A binary from before the compact codec also fails every
// read of a receipt or resource state written in it, one from before codec
// byte 2 every read of a receipt written since, one from before the
// receipt's LandBy (codec.go) every read of a receipt that has one, and one
// from before fDelegated every read of a delegated write's receipt
// (INTERNAL: a value it cannot decode is never taken for another). Opened
// again by this code, such a file is repaired (repairLive): the rolled-back
// binary's live entries are moved into byres and the entries of receipts it
// freed or compacted are dropped.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

// OpenTimeout is how long Open waits for the file lock held by another opener.
const OpenTimeout = 2 * time.Second

var (
	bResources  = []byte("resources")
	bReceipts   = []byte("receipts")
	bLive       = []byte("live") // layout 3 and older: its entries are in byres now
	bByOp       = []byte("byop")
	bByState    = []byte("bystate")
	bQuarantine = []byte("quarantine")
	bVersions   = []byte("versions")
	bTargets    = []byte("targets") // target -> the resource it is fenced under
	bByRes      = []byte("byres")
	bQIDs       = []byte("qids")
	allBuckets  = [][]byte{bResources, bReceipts, bByOp, bByState, bQuarantine, bVersions, bTargets, bByRes, bQIDs, bQReceipts, bQLast}
)

// appendBuckets are the buckets whose keys grow only at the end of each
// prefix (a creation time follows it; the gateway's receipt IDs begin with
// their time), so a page that fills up gets no more keys between its own:
// write transactions split them full (FillPercent 1) instead of half full,
// which halves their pages. A settle rewrites its receipt no larger (the
// codec's settle room), so receipts qualify. byres is not one of them:
// its keys grow in the middle of each resource's range (between the
// by-resource and the live entries), where full splits would leave a page
// per insert.
var appendBuckets = [][]byte{bByOp, bByState, bReceipts}

// fillAppendBuckets sets the split fill of appendBuckets, and of their
// journal buckets, for write transaction tx (bbolt keeps the bucket handles,
// and FillPercent, per transaction).
func fillAppendBuckets(tx *bolt.Tx) {
	for _, name := range appendBuckets {
		for _, n := range [][]byte{name, journalOf[string(name)]} {
			if b := tx.Bucket(n); b != nil {
				b.FillPercent = 1
			}
		}
	}
}

// Store is the embedded FenceStore. It is safe for concurrent use.
type Store struct {
	db    *bolt.DB
	batch *batcher

	// compactMu guards compactFrom: per settled state, the by-state key
	// where the last step of CompactReceipts stopped (compact.go).
	compactMu   sync.Mutex
	compactFrom map[fencegate.ReceiptState][]byte
	// compactScanned counts the by-state entries CompactReceipts examined.
	compactScanned atomic.Uint64

	closing  sync.Once
	closeErr error
}

var _ fencegate.FenceStore = (*Store)(nil)

// Open opens (creating if needed) the store file at path.
func Open(path string, opts ...Option) (*Store, error) {
	// NoFreelistSync: the freelist is rebuilt from the pages at Open instead
	// of being written at every commit (what etcd does); commits stay
	// durable, they only write less.
	// The array freelist hands out the lowest free pages first, so the pages
	// a commit writes, most of them the journal's (journal.go), are
	// recycled in one region of the file and lie near each other; the
	// hashmap freelist (etcd's choice) takes any free page, which in a large
	// file scatters a commit over it: with 1,000,000 receipts a commit's
	// write and sync took 1.6-2.1x as long with it (1,053-1,270 against
	// 605-650 µs, BenchmarkWriteCost), and the array freelist made a write
	// as cheap as on an empty store. Its price (README, Known limitations):
	// each write transaction begins by merging the pages freed before into
	// a sorted list of every free page, and a value over a page scans that
	// list for a run, both linear in the free pages; and bbolt means to drop
	// the array type one day (a TODO in its db.go), when this choice must be
	// measured again.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: OpenTimeout, NoFreelistSync: true, FreelistType: bolt.FreelistArrayType})
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInternal, "open fence store "+path)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if err := createJournal(tx); err != nil {
			return err
		}
		if err := upgrade(tx); err != nil {
			return err
		}
		return repairQuarantineIndex(tx)
	})
	if err == nil {
		_, _, _, err = moveJournal(db, db.Update, moveBudget, 0) // what a crash left there
	}
	if err != nil {
		_ = db.Close()
		return nil, fencegate.Wrap(err, fencegate.CodeInternal, "initialise fence store "+path)
	}
	s := &Store{db: db, batch: newBatcher(db)}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Close waits for the writes in flight, moves the journal into the big
// trees (journal.go) and closes the file. A failed move loses nothing: the
// next Open moves the journal.
// Closing a closed Store does nothing more and returns what the first
// Close returned.
func (s *Store) Close() error {
	s.closing.Do(func() {
		s.batch.close()
		var merr error
		if s.batch.failed.Load() == nil { // nothing is written over a failed commit
			_, _, _, merr = moveJournal(s.db, s.batch.durableUpdate, moveBudget, 0) // readers may still be about
		}
		if err := errors.Join(merr, s.db.Close()); err != nil {
			s.closeErr = fencegate.Wrap(err, fencegate.CodeInternal, "close fence store")
		}
	})
	return s.closeErr
}

// Admit implements fencegate.FenceStore and fencegate.PriorSettling: a
// prior settle is applied first, in the same op (so the same transaction and
// fsync), and the segment is decided on the state it left.
func (s *Store) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	if err := ctx.Err(); err != nil {
		return fencegate.Admission{}, ctxErr(err)
	}
	if err := fencerules.ValidateAdmit(&req); err != nil {
		return fencegate.Admission{}, err
	}
	var (
		adm    fencegate.Admission
		segErr error // the segment's refusal
	)
	err := s.batch.do(func(tx *bolt.Tx) error {
		adm, segErr = fencegate.Admission{}, nil // the op may run again, on a rolled-back state
		var prior fencegate.Admission
		if p := req.Prior; p != nil {
			r, err := settleTx(tx, p.ReceiptID, &p.Outcome)
			var rf refusal
			switch {
			case errors.As(err, &rf):
				prior.PriorErr = rf.err
			case err != nil:
				return err // a fault: the batch rolls back, the prior with it
			default:
				prior.Prior = &r
			}
		}
		// The segment's refusal is an answer, not the op's error: after a
		// prior (or a quarantine record) was written, refuse() no longer
		// holds, and the batch must commit what was written.
		var err error
		adm, segErr, err = admitTx(tx, &req)
		adm.Prior, adm.PriorErr = prior.Prior, prior.PriorErr
		return err
	})
	if err != nil {
		return fencegate.Admission{}, storeErr(err, "admit")
	}
	if segErr != nil {
		if req.Prior == nil {
			return fencegate.Admission{}, segErr
		}
		return fencegate.Admission{Prior: adm.Prior, PriorErr: adm.PriorErr}, segErr
	}
	return adm, nil
}

// SettlesPrior implements fencegate.PriorSettling.
func (s *Store) SettlesPrior() bool { return true }

var _ fencegate.PriorSettling = (*Store)(nil)

// Settle implements fencegate.FenceStore.
func (s *Store) Settle(ctx context.Context, receiptID string, o fencegate.Outcome) (fencegate.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return fencegate.Receipt{}, ctxErr(err)
	}
	var out fencegate.Receipt
	err := s.batch.do(func(tx *bolt.Tx) error {
		var err error
		out, err = settleTx(tx, receiptID, &o) // reset on every run: the op may run again
		return err
	})
	if err != nil {
		return fencegate.Receipt{}, storeErr(err, "settle")
	}
	return out, nil
}

// Resource implements fencegate.FenceStore.
func (s *Store) Resource(ctx context.Context, resource string) (fencegate.ResourceState, error) {
	var row fencegate.ResourceState
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var found bool
		var err error
		row, found, err = getResource(tx, resource)
		if err == nil && !found {
			err = fencegate.Errorf(fencegate.CodeNotFound, "resource %q has no fence state", resource)
		}
		return err
	})
	if err != nil {
		return fencegate.ResourceState{}, storeErr(err, "read resource")
	}
	return row, nil
}

// Receipt implements fencegate.FenceStore.
func (s *Store) Receipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	var r fencegate.Receipt
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		r, err = getReceipt(tx, id)
		return err
	})
	if err != nil {
		return fencegate.Receipt{}, storeErr(err, "read receipt")
	}
	return r, nil
}

// ReceiptAt implements fencegate.FenceStore.
func (s *Store) ReceiptAt(ctx context.Context, resource string, fence, segment uint64) (fencegate.Receipt, error) {
	var r fencegate.Receipt
	err := s.view(ctx, func(tx *bolt.Tx) error {
		id := treeOf(tx, bByRes).Get(liveKey(resource, fence, segment))
		if id == nil {
			return fencegate.Errorf(fencegate.CodeNotFound, "no live receipt for %s fence %d segment %d", resource, fence, segment)
		}
		var err error
		r, err = getReceipt(tx, string(id))
		return err
	})
	if err != nil {
		return fencegate.Receipt{}, storeErr(err, "read receipt")
	}
	return r, nil
}

// Version implements fencegate.FenceStore.
func (s *Store) Version(ctx context.Context, target string) (string, error) {
	var v string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		v = getVersion(tx, target)
		return nil
	})
	if err != nil {
		return "", storeErr(err, "read version")
	}
	return v, nil
}

// view runs fn in a read transaction on the last durable commit
// (durable.go), or answers the store's failure.
func (s *Store) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return ctxErr(err)
	}
	tx, err := s.batch.beginRead() // the last durable commit (durable.go)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	return fn(tx)
}

// --- encoding helpers --------------------------------------------------------

func getResource(tx *bolt.Tx, resource string) (row fencegate.ResourceState, found bool, err error) {
	v := treeOf(tx, bResources).Get([]byte(resource))
	if v == nil {
		return fencegate.ResourceState{Resource: resource}, false, nil
	}
	if err := decodeResource(v, &row); err != nil {
		return row, false, fmt.Errorf("decode resource %q: %w", resource, err)
	}
	return row, true, nil
}

func getReceipt(tx *bolt.Tx, id string) (fencegate.Receipt, error) {
	var r fencegate.Receipt
	v := treeOf(tx, bReceipts).Get([]byte(id))
	if v == nil {
		return r, fencegate.Errorf(fencegate.CodeNotFound, "receipt %q not found", id)
	}
	if err := decodeReceipt(v, &r); err != nil {
		return r, fmt.Errorf("decode receipt %q: %w", id, err)
	}
	return r, nil
}

// putReceipt writes r and moves its by-state index entry from oldState ("" for
// a new receipt) to r.State.
func putReceipt(tx *bolt.Tx, r *fencegate.Receipt, oldState fencegate.ReceiptState) error {
	v, err := encodeReceipt(r)
	if err != nil {
		return err
	}
	if err := treeOf(tx, bReceipts).Put([]byte(r.ID), v); err != nil {
		return err
	}
	bs := treeOf(tx, bByState)
	if oldState != "" {
		if err := bs.Delete(stateKey(oldState, r)); err != nil {
			return err
		}
	}
	return bs.Put(stateKey(r.State, r), []byte(r.ID))
}

// putResource writes row.
func putResource(tx *bolt.Tx, row *fencegate.ResourceState) error {
	return treeOf(tx, bResources).Put([]byte(row.Resource), encodeResource(row))
}

func getVersion(tx *bolt.Tx, target string) string {
	return string(treeOf(tx, bVersions).Get([]byte(target)))
}

// storeErr passes *fencegate.Error through and wraps anything else (bbolt and
// decoding faults) as INTERNAL.
func storeErr(err error, op string) error {
	var fe *fencegate.Error
	if errors.As(err, &fe) {
		return err
	}
	return fencegate.Wrap(err, fencegate.CodeInternal, "fence store: "+op)
}

func ctxErr(err error) error {
	return fencegate.Wrap(err, fencegate.CodeInternal, "fence store: request cancelled")
}

// SwapVersion sets target's version from -> to in one transaction.
func (s *Store) SwapVersion(ctx context.Context, target, from, to string) error {
	if err := ctx.Err(); err != nil {
		return ctxErr(err)
	}
	err := s.batch.do(func(tx *bolt.Tx) error {
		if cur := getVersion(tx, target); cur != from {
			return refuse(fencegate.Errorf(fencegate.CodeBackendConflict, "version of %q is %q, not %q", target, cur, from))
		}
		vb := treeOf(tx, bVersions)
		if to == "" {
			return vb.Delete([]byte(target))
		}
		return vb.Put([]byte(target), []byte(to))
	})
	if err != nil {
		return storeErr(err, "swap version")
	}
	return nil
}
