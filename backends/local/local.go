// Package local is the embedded default object store: a local directory with
// S3 conditional-write semantics (If-Match / If-None-Match on Put, If-Match on
// Delete). One Store owns the directory: it is the only writer, and it
// remembers the ETag it last wrote or read per key instead of reading it
// back before every write. New takes an exclusive lock on the directory
// (flock on dir/objects/.lock, held until Close or the process ends), so a
// second Store on it, in this process or another, is refused rather than
// checking conditions against versions the other has replaced.
//
// Layout: every object is one file, dir/objects/<hex SHA-256 of key>, holding
// the body followed by a JSON trailer (key, ETag, size, content type,
// metadata, time written; padded with spaces), the trailer's length and a
// magic, so body and metadata change together. Files named .tmp-* hold no
// object: spares being filled, and replaced versions kept for reuse; New
// removes them. File names are hashes, so no key can escape dir. It is the
// layout earlier versions wrote; they and this one read each other's files.
// A trailer holds at most 1 MiB of JSON (and its padding), what a read
// accepts: fencegate.PutRequest.Validate, which Put and Stage call before
// anything is written, bounds the key, content type and user metadata
// (INVALID_REQUEST past them) far below that.
//
// # Durability: a Put step by step
//
//  1. Outside the key's lock: take a spare (a replaced object's old file,
//     usually still open from the write that made it; else opened, or a
//     new temp file), write body and trailer into it at offset 0 (one
//     write for a body up to 64 KiB), truncate what is left of its old
//     contents (only when the length changes), fdatasync. A crash here
//     changes no object; the spare is garbage under a temp name.
//  2. Under the key's lock: check the condition against the known ETag,
//     the context and the landing deadline (fencegate.LandBy), then swap
//     the spare in with one rename in the one directory: renameat2
//     RENAME_EXCHANGE when the key exists (its old file moves to the
//     spare's temp name), RENAME_NOREPLACE when it does not. A crash after
//     the swap leaves the old object or the new one, each whole (the new
//     one's bytes are durable since step 1).
//  3. Still under the lock, fsync the directory (shared with concurrent
//     writers, below); then answer. When Put (or Delete, whose remove is
//     synced the same way) returns success, the change survives a crash
//     of the process or the machine.
//  4. The old file, now under the temp name, is the next write's spare
//     (its descriptor kept open), unless a reader holds it open (a Get
//     keeps reading the version it opened) or it is over 1 MiB: then it
//     is removed. A spare is only overwritten after the directory fsync
//     that gave it its temp name succeeded, so no crash can bring it back
//     as the object it was.
//
// So on Linux a steady replace is four system calls: pwrite, fdatasync, renameat2
// and the (shared) directory fsync. It opens and closes nothing: the
// directory is held open from New to Close (names are resolved relative
// to it), and the file a Put wrote stays open under its key (at most 256
// such files, and 64 spares; Close closes them), so when the key is next
// replaced the old file is a spare with its descriptor at hand. It
// allocates and frees no inode and no block and adds or removes no
// directory entry, and when the new contents have the old length (the
// padding absorbs small changes) its fdatasync writes no inode: one data
// write and a cache flush.
//
// The two syncs are the fewest that keep the guarantee on any POSIX
// filesystem: without the file's, the rename could be durable while the
// bytes it publishes are not (the spare's previous contents, an older
// object, would be read back in their place); without the directory's, a
// crash could undo a Put its caller was told had happened. The file sync
// is one per Put and cannot be shared (it must precede that Put's rename,
// and POSIX has no call that makes several files' data durable at once:
// syncfs is Linux's and writes out the whole filesystem, sync_file_range
// writes no metadata and flushes no cache); it is fdatasync, since what it skips
// (timestamps) is not needed to read the object back (the time written is
// in the trailer). The directory fsync is shared by the writers that finish
// at the same time (dirSyncer): each waits for one that began after its own
// rename, so a burst of c writers pays one or two instead of c; and an
// fsync about to begin first waits (at most 500 µs) for the writers whose
// small file's write and fdatasync are already under way, so that their
// renames join it instead of each queueing for the next (a lone writer
// never waits; what an fsync covers is still decided by when it begins,
// so the guarantee is the same). That sharing
// is why the directory stays flat: subdirectories would need one fsync per
// subdirectory touched per burst, and since a replace adds no entry, the
// directory's size is not on the write path (BenchmarkPut). O_TMPFILE and
// linkat are not used: linkat cannot replace a file, and a linked O_TMPFILE
// inode's link count needs one more fsync of the file to be durable.
//
// Staging (Stage, fencegate.ObjectStager; stage.go) is step 1 alone: the
// spare is filled and synced and held for the caller, and its StagedPut's
// Put runs steps 2 to 4 under the condition it is given then, or Discard
// gives the spare back. The gateway stages a small write while its
// admission commits, so that the file sync runs beside the admission's
// commit: no object changes until the staged put, after the admission.
//
// Head, Get and List open a file under the key's lock (shared), so they
// never see a rename whose directory fsync has not completed; after a failed
// directory fsync they answer only once a fresh one succeeds (checked under
// that lock, so a reader queued behind the failed writer sees its failure).
// List, which learns of a deleted object by its absence from the directory,
// waits after reading it for every stripe's writer once, so a Delete whose
// fsync is running (or failed) is not shown either. What they show
// survives a crash.
//
// ETag: "<hex SHA-256 of the body>-<16 hex random write id>". The digest lets a
// reader compare content; the write id makes every successful Put produce a new
// ETag, even for equal bytes and across delete and re-create, so a stale ETag
// can never match a later write (no ABA).
package local

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate"
)

const (
	tmpPrefix = ".tmp-"
	lockName  = ".lock" // not a hash, so never an object; not removed by New
)

// lockWait is how long New waits for another owner's lock (a process that
// is exiting) before refusing the directory (a variable for tests).
var lockWait = 2 * time.Second

var errInUse = errors.New("directory is in use by another open store (one Store per directory)")

// Store is a directory-backed fencegate.ObjectStore. It is safe for concurrent
// use; conditional checks and the swap they guard are serialized per key.
type Store struct {
	name    string
	dir     string  // dir/objects
	d       *objDir // dir, held open
	now     func() time.Time
	dirs    *dirSyncer
	stripes [256]stripe
	spares  sparePool
	pins    pinSet
	lock    *os.File     // holds the directory's exclusive lock
	life    life         // operations using the descriptors (Close waits for them)
	held    atomic.Int64 // object files held open in known entries (maxHeld)

	fileSyncs atomic.Uint64 // object-file fsyncs, for tests and measurements
	// onListWait, if set (tests), is called as a List starts to wait for a
	// writer's directory fsync (list.go).
	onListWait func()
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock a write's landing deadline is checked on and its
// time written is taken from (default time.Now); the simulation passes its own.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

var _ fencegate.ObjectStore = (*Store)(nil)

// New opens (creating if needed) the store named name in directory dir,
// removes temp files left by an interrupted write or kept for reuse, and
// fsyncs the directories before it serves: what a reader sees of them is
// durable, also after a process died between a rename and its directory
// fsync.
func New(name, dir string, opts ...Option) (*Store, error) {
	if name == "" || dir == "" {
		return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "local object store needs a name and a directory")
	}
	objs := filepath.Join(dir, "objects")
	if err := os.MkdirAll(objs, 0o750); err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("store %q: create directory", name))
	}
	lock, err := lockDir(objs)
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("store %q: lock directory %s", name, objs))
	}
	entries, err := os.ReadDir(objs)
	if err != nil {
		lock.Close()
		return nil, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("store %q: read directory", name))
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			_ = os.Remove(filepath.Join(objs, e.Name()))
		}
	}
	d, err := openObjDir(objs)
	if err != nil {
		lock.Close()
		return nil, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("store %q: open directory", name))
	}
	s := &Store{name: name, dir: objs, d: d, now: time.Now, dirs: newDirSyncer(objs, func(p string) error { return syncDir(d, p) }), lock: lock}
	s.spares.dir = d
	for _, o := range opts {
		o(s)
	}
	// What the directories show may not be durable yet: a rename of a
	// process that died (or whose fsync failed) before its directory
	// fsync, or the objects directory MkdirAll just made. The objects
	// directory and dir (which holds its entry) are fsynced, by the store's
	// one directory sync, before anything is read, since a Head here may
	// prove (settle) a receipt from what it sees; dir's own entry in its
	// parent is the operator's (it is made once, before the first start).
	for _, p := range []string{objs, dir} {
		if err := s.dirs.sync(p); err != nil {
			_ = d.close()
			lock.Close()
			return nil, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("store %q: sync directory %s", name, p))
		}
	}
	return s, nil
}

// syncDir fsyncs directory p: the objects directory d through the
// descriptor the store holds, another (its parent, at New) opened for it.
func syncDir(d *objDir, p string) error {
	if p == d.path {
		return d.sync()
	}
	o, err := openObjDir(p)
	if err != nil {
		return err
	}
	defer o.close()
	return o.sync()
}

// Close refuses new operations, waits (up to 5 s) for those running, then
// closes the files the store holds open and releases the directory's lock,
// so another Store may open it. When operations outlive the wait it closes
// nothing and reports it: a descriptor closed under a running Put could be
// reused by another open, and that Put's directory fsync land on the wrong
// file. A second Close does nothing.
func (s *Store) Close() error {
	first, busy := s.life.close(closeWait)
	if !first {
		return nil
	}
	if busy > 0 {
		return s.closeBusy(busy)
	}
	s.closeHeld()
	s.spares.closeAll()
	_ = s.d.close()
	return s.lock.Close()
}

// expired refuses a write whose landing deadline (fencegate.LandBy) has
// passed: checked under the key's lock, right before the write would land;
// the error's cause is fencegate.ErrNotApplied.
func (s *Store) expired(ctx context.Context, what, key string) error {
	t, ok := fencegate.LandBy(ctx)
	if ok && !s.now().Before(t) {
		return fencegate.Wrap(fencegate.ErrNotApplied, fencegate.CodeBackendUnavailable, fmt.Sprintf("store %q: %s %q arrived after its landing deadline %s",
			s.name, what, key, t.UTC().Format(time.RFC3339Nano)))
	}
	return nil
}

// Name returns the store's configured name.
func (s *Store) Name() string { return s.name }

// slot returns the key's file name and the stripe that guards it.
func (s *Store) slot(key string) (string, *stripe) {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:]), &s.stripes[sum[0]]
}

func (s *Store) unavailable(err error, what, key string) error {
	return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("store %q: %s %q", s.name, what, key))
}

func (s *Store) notFound(key string) error {
	return fencegate.Errorf(fencegate.CodeNotFound, "store %q: object %q not found", s.name, key)
}

func preconditionFailed(store, key, cond string) error {
	return fencegate.Wrap(fencegate.ErrPreconditionFailed, fencegate.CodeBackendConflict,
		fmt.Sprintf("store %q: %s does not hold for %q", store, cond, key))
}

// current returns what is at name: remembered, or read from its trailer
// (and then remembered). Called under st's lock.
func (s *Store) current(st *stripe, name string) (known, error) {
	if k, ok := st.known[name]; ok {
		return k, nil
	}
	tr, err := s.readTrailerAt(name)
	var k known
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return known{}, err
	default:
		k = known{exists: true, etag: tr.ETag, len: tr.fileLen}
	}
	s.remember(st, name, k)
	return k, nil
}

// Get opens the object. The reader sees the version current at open time, even
// if the object is replaced or deleted while it is being read.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, fencegate.ObjectInfo, error) {
	if !s.life.enter() {
		return nil, fencegate.ObjectInfo{}, s.closedErr("get", key)
	}
	defer s.life.leave()
	name, f, tr, err := s.open(ctx, key)
	if err != nil {
		return nil, fencegate.ObjectInfo{}, err
	}
	return &reader{Reader: io.NewSectionReader(f, 0, tr.Size), f: f, unpin: func() { s.pins.unpin(name) }}, info(tr), nil
}

// Head describes the object. After a failed directory fsync it answers only
// once a fresh one succeeds: an object it shows survives a crash.
func (s *Store) Head(ctx context.Context, key string) (fencegate.ObjectInfo, error) {
	if !s.life.enter() {
		return fencegate.ObjectInfo{}, s.closedErr("head", key)
	}
	defer s.life.leave()
	name, f, tr, err := s.open(ctx, key)
	if err != nil {
		return fencegate.ObjectInfo{}, err
	}
	f.Close()
	s.pins.unpin(name)
	return info(tr), nil
}

// open opens key's file and reads its trailer, pinning the file name (the
// caller unpins once it has closed the file).
func (s *Store) open(ctx context.Context, key string) (string, *os.File, trailer, error) {
	if err := fencegate.CheckName(key); err != nil {
		return "", nil, trailer{}, err
	}
	if err := ctx.Err(); err != nil {
		return "", nil, trailer{}, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "read cancelled")
	}
	name, st := s.slot(key)
	f, tr, err := s.openPinned(st, name)
	var ud unsynced
	switch {
	case errors.As(err, &ud):
		return "", nil, trailer{}, s.unavailable(ud.err, "sync directory before reading", key)
	case errors.Is(err, fs.ErrNotExist):
		return "", nil, trailer{}, s.notFound(key)
	case err != nil:
		return "", nil, trailer{}, s.unavailable(err, "read", key)
	}
	return name, f, tr, nil
}

// unsynced is openPinned's error when the directory is not known durable.
type unsynced struct{ err error }

func (u unsynced) Error() string { return u.err.Error() }

// openPinned opens the file at name under st's shared lock (no swap of it
// is between its rename and its directory fsync) and pins it; on error it
// is unpinned again. Durability is checked under the lock: a writer this
// reader queued behind has recorded whether its directory fsync failed.
func (s *Store) openPinned(st *stripe, name string) (*os.File, trailer, error) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	if err := s.dirs.Durable(); err != nil {
		return nil, trailer{}, unsynced{err}
	}
	s.pins.pin(name)
	f, err := s.d.openR(name)
	if err != nil {
		s.pins.unpin(name)
		return nil, trailer{}, err
	}
	tr, err := readTrailer(f)
	if err != nil {
		f.Close()
		s.pins.unpin(name)
		return nil, trailer{}, err
	}
	return f, tr, nil
}

func info(tr trailer) fencegate.ObjectInfo {
	return fencegate.ObjectInfo{Key: tr.Key, ETag: tr.ETag, Size: tr.Size, ContentType: tr.ContentType, Metadata: tr.Metadata,
		LastModified: tr.modTime}
}

// reader is a Get's body: Close closes the file and unpins it, once.
type reader struct {
	io.Reader
	f     *os.File
	once  sync.Once
	unpin func()
}

func (r *reader) Close() error {
	err := r.f.Close()
	r.once.Do(r.unpin)
	return err
}

// ctxReader stops a copy when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
