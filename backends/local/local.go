// Package local is the embedded default object store: a local directory with
// S3 conditional-write semantics (If-Match / If-None-Match on Put, If-Match on
// Delete). One process owns the directory.
//
// Layout: every object is one file, dir/objects/<hex SHA-256 of key>, holding
// the body followed by a JSON trailer (key, ETag, size, content type, metadata),
// the trailer's length and a magic. Body and metadata therefore change together:
// a Put writes a temp file in the same directory, fsyncs it and renames it over
// the old one, so a reader sees either the old object or the new one, never new
// bytes with old metadata. File names are hashes, so no key can escape dir.
//
// # Durability
//
// When Put or Delete returns success, the change survives a crash of the
// process or the machine: a Put's bytes and trailer were fsynced before the
// rename, and the directory was fsynced after it (a Delete: after the
// remove). A crash before that leaves the old object or the new one, whole
// (a temp file left behind is removed by New). The file fsync is one per Put
// and cannot be shared (it is what makes the bytes durable before the rename
// publishes them); the directory fsync is shared by the writers that finish
// at the same time (dirSyncer): each waits for an fsync that began after its
// own rename, so at concurrency c a burst of writers pays one or two
// directory fsyncs instead of c. That is the fewest that keep the guarantee:
// skipping either fsync lets a crash publish a file whose bytes are missing
// or lose a rename the caller was told had happened.
//
// ETag: "<hex SHA-256 of the body>-<16 hex random write id>". The digest lets a
// reader compare content; the write id makes every successful Put produce a new
// ETag, even for equal bytes and across delete and re-create, so a stale ETag
// can never match a later write (no ABA).
package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
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
	magic      = "FGO1"
	tailLen    = 4 + len(magic) // uint32 trailer length + magic
	maxTrailer = 1 << 20
	tmpPrefix  = ".tmp-"
)

// Store is a directory-backed fencegate.ObjectStore. It is safe for concurrent
// use; conditional checks and the swap they guard are serialized per key.
type Store struct {
	name  string
	dir   string // dir/objects
	now   func() time.Time
	dirs  *dirSyncer
	locks [64]sync.Mutex

	fileSyncs atomic.Uint64 // object-file fsyncs, for tests and measurements
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock a write's landing deadline is checked on
// (default time.Now); the simulation passes its own.
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

var _ fencegate.ObjectStore = (*Store)(nil)

// trailer is the per-object record stored after the body.
type trailer struct {
	Key         string            `json:"key"`
	ETag        string            `json:"etag"`
	Size        int64             `json:"size"`
	ContentType string            `json:"content_type"`
	Metadata    map[string]string `json:"metadata"`
	modTime     time.Time         // the file's, not stored in the trailer
}

// New opens (creating if needed) the store named name in directory dir and
// removes temp files left by an interrupted write.
func New(name, dir string, opts ...Option) (*Store, error) {
	if name == "" || dir == "" {
		return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "local object store needs a name and a directory")
	}
	objs := filepath.Join(dir, "objects")
	if err := os.MkdirAll(objs, 0o750); err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("store %q: create directory", name))
	}
	entries, err := os.ReadDir(objs)
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("store %q: read directory", name))
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			_ = os.Remove(filepath.Join(objs, e.Name()))
		}
	}
	s := &Store{name: name, dir: objs, now: time.Now, dirs: newDirSyncer(objs)}
	for _, o := range opts {
		o(s)
	}
	return s, nil
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

func (s *Store) path(key string) (string, *sync.Mutex) {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:])), &s.locks[sum[0]%byte(len(s.locks))]
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

// Put writes the object if its condition holds. The body is streamed to a temp
// file first; only the check and the rename happen under the key's lock.
func (s *Store) Put(ctx context.Context, req fencegate.PutRequest) (string, error) {
	if err := req.Validate(); err != nil {
		return "", err
	}
	path, mu := s.path(req.Key)
	tmp, etag, err := s.writeTemp(ctx, req)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp) // no-op once renamed

	mu.Lock()
	defer mu.Unlock()
	cur, err := readTrailerAt(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if req.IfMatch != "" {
			return "", preconditionFailed(s.name, req.Key, "If-Match "+req.IfMatch)
		}
	case err != nil:
		return "", s.unavailable(err, "read", req.Key)
	case req.IfNoneMatch:
		return "", preconditionFailed(s.name, req.Key, "If-None-Match: *")
	case cur.ETag != req.IfMatch:
		return "", preconditionFailed(s.name, req.Key, "If-Match "+req.IfMatch)
	}
	if err := ctx.Err(); err != nil {
		return "", fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "put cancelled before it was applied")
	}
	if err := s.expired(ctx, "put", req.Key); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", s.unavailable(err, "replace", req.Key)
	}
	if err := s.dirs.Sync(); err != nil {
		// The object is in place but may not survive a crash: no definite
		// answer. Head and Get answer only once a directory fsync succeeds
		// (Durable), so reading the object back proves nothing before that.
		return "", s.unavailable(err, "sync directory for", req.Key)
	}
	return etag, nil
}

// writeTemp streams the body and its trailer into a synced temp file.
func (s *Store) writeTemp(ctx context.Context, req fencegate.PutRequest) (path, etag string, err error) {
	f, err := os.CreateTemp(s.dir, tmpPrefix)
	if err != nil {
		return "", "", s.unavailable(err, "create temp file for", req.Key)
	}
	path = f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(path)
		}
	}()
	h := sha256.New()
	var n int64
	if req.Body != nil {
		n, err = io.Copy(io.MultiWriter(f, h), io.LimitReader(ctxReader{ctx, req.Body}, req.Size+1))
		if err != nil {
			if ctx.Err() != nil {
				return "", "", fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "put cancelled before it was applied")
			}
			return "", "", s.unavailable(err, "write", req.Key)
		}
	}
	if n != req.Size {
		return "", "", fencegate.Errorf(fencegate.CodeInvalidRequest, "put of %q: body has %d bytes, size says %d", req.Key, n, req.Size)
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	etag = `"` + hex.EncodeToString(h.Sum(nil)) + "-" + hex.EncodeToString(id) + `"`
	ct := req.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	tr, err := json.Marshal(trailer{Key: req.Key, ETag: etag, Size: n, ContentType: ct, Metadata: req.Metadata()})
	if err != nil {
		return "", "", fencegate.Wrap(err, fencegate.CodeInternal, "encode object trailer")
	}
	tr = binary.BigEndian.AppendUint32(tr, uint32(len(tr)))
	tr = append(tr, magic...)
	if _, err = f.Write(tr); err != nil {
		return "", "", s.unavailable(err, "write", req.Key)
	}
	s.fileSyncs.Add(1)
	if err = f.Sync(); err != nil {
		return "", "", s.unavailable(err, "sync", req.Key)
	}
	if err = f.Close(); err != nil {
		return "", "", s.unavailable(err, "close", req.Key)
	}
	return path, etag, nil
}

// Delete removes the object if its ETag equals ifMatch. NOT_FOUND if it does
// not exist; a different ETag fails with cause ErrPreconditionFailed.
func (s *Store) Delete(ctx context.Context, key, ifMatch string) error {
	if err := fencegate.CheckName(key); err != nil {
		return err
	}
	if ifMatch == "" {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "delete of %q needs If-Match", key)
	}
	if err := ctx.Err(); err != nil {
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "delete cancelled before it was applied")
	}
	path, mu := s.path(key)
	mu.Lock()
	defer mu.Unlock()
	cur, err := readTrailerAt(path)
	switch {
	case errors.Is(err, fs.ErrNotExist): // If-Match on a missing key does not hold
		return preconditionFailed(s.name, key, "If-Match "+ifMatch+" on a missing key")
	case err != nil:
		return s.unavailable(err, "read", key)
	case cur.ETag != ifMatch:
		return preconditionFailed(s.name, key, "If-Match "+ifMatch)
	}
	if err := s.expired(ctx, "delete", key); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		return s.unavailable(err, "delete", key)
	}
	if err := s.dirs.Sync(); err != nil {
		return s.unavailable(err, "sync directory for", key)
	}
	return nil
}

// Get opens the object. The reader sees the version current at open time, even
// if the object is replaced or deleted while it is being read.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, fencegate.ObjectInfo, error) {
	f, tr, err := s.open(ctx, key)
	if err != nil {
		return nil, fencegate.ObjectInfo{}, err
	}
	return readCloser{io.NewSectionReader(f, 0, tr.Size), f}, info(tr), nil
}

// Head describes the object. After a failed directory fsync it answers only
// once a fresh one succeeds: an object it shows survives a crash.
func (s *Store) Head(ctx context.Context, key string) (fencegate.ObjectInfo, error) {
	f, tr, err := s.open(ctx, key)
	if err != nil {
		return fencegate.ObjectInfo{}, err
	}
	f.Close()
	return info(tr), nil
}

func (s *Store) open(ctx context.Context, key string) (*os.File, trailer, error) {
	if err := fencegate.CheckName(key); err != nil {
		return nil, trailer{}, err
	}
	if err := ctx.Err(); err != nil {
		return nil, trailer{}, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "read cancelled")
	}
	if err := s.dirs.Durable(); err != nil {
		return nil, trailer{}, s.unavailable(err, "sync directory before reading", key)
	}
	path, _ := s.path(key)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, trailer{}, s.notFound(key)
	}
	if err != nil {
		return nil, trailer{}, s.unavailable(err, "open", key)
	}
	tr, err := readTrailer(f)
	if err != nil {
		f.Close()
		return nil, trailer{}, s.unavailable(err, "read", key)
	}
	return f, tr, nil
}

func info(tr trailer) fencegate.ObjectInfo {
	return fencegate.ObjectInfo{Key: tr.Key, ETag: tr.ETag, Size: tr.Size, ContentType: tr.ContentType, Metadata: tr.Metadata,
		LastModified: tr.modTime}
}

func readTrailerAt(path string) (trailer, error) {
	f, err := os.Open(path)
	if err != nil {
		return trailer{}, err
	}
	defer f.Close()
	return readTrailer(f)
}

func readTrailer(f *os.File) (trailer, error) {
	st, err := f.Stat()
	if err != nil {
		return trailer{}, err
	}
	end := st.Size()
	tail := make([]byte, tailLen)
	if end < int64(tailLen) {
		return trailer{}, fmt.Errorf("object file %s is truncated", f.Name())
	}
	if _, err := f.ReadAt(tail, end-int64(tailLen)); err != nil {
		return trailer{}, err
	}
	if !bytes.Equal(tail[4:], []byte(magic)) {
		return trailer{}, fmt.Errorf("object file %s has no trailer", f.Name())
	}
	n := int64(binary.BigEndian.Uint32(tail))
	if n > maxTrailer || n > end-int64(tailLen) {
		return trailer{}, fmt.Errorf("object file %s has a bad trailer length", f.Name())
	}
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, end-int64(tailLen)-n); err != nil {
		return trailer{}, err
	}
	var tr trailer
	if err := json.Unmarshal(buf, &tr); err != nil {
		return trailer{}, fmt.Errorf("object file %s: %w", f.Name(), err)
	}
	if tr.Size != end-int64(tailLen)-n {
		return trailer{}, fmt.Errorf("object file %s: size mismatch", f.Name())
	}
	tr.modTime = st.ModTime().UTC()
	return tr, nil
}

type readCloser struct {
	io.Reader
	io.Closer
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
