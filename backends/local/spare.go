package local

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"sync"

	"github.com/fencegate/fencegate"
)

const (
	// maxSpares bounds the reusable files kept between writes (about one
	// per concurrent writer is used).
	maxSpares = 64
	// maxSpareLen: a replaced object file longer than this is removed,
	// not kept for reuse, so spares hold little disk.
	maxSpareLen = 1 << 20
	// smallBody: a body up to this size is read into memory and written
	// with its trailer in one write; a larger one is streamed.
	smallBody = 64 << 10
)

// spare is a file in the objects directory, under a temp name, that no
// object refers to: the old version of a replaced object, or a fresh temp
// file. A write fills one and swaps it in.
type spare struct {
	name string // its temp name in the directory
	f    *wfile // open for writing, or nil (opened when taken)
	len  int64  // its length now
}

// sparePool holds spares for reuse. A file enters it only (a) after the
// directory fsync that made its temp name durable succeeded (a replaced
// object: the swap that gave it that name was synced, so no crash can
// bring it back as a live object after it is overwritten) or (b) when it
// never was an object (a fresh temp file whose write was refused).
type sparePool struct {
	dir  *objDir
	mu   sync.Mutex
	free []spare
}

func (p *sparePool) take() (spare, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) == 0 {
		return spare{}, false
	}
	sp := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	return sp, true
}

// give keeps sp for reuse, or closes and removes its file when the pool is
// full.
func (p *sparePool) give(sp spare) {
	p.mu.Lock()
	full := len(p.free) >= maxSpares
	if !full {
		p.free = append(p.free, sp)
	}
	p.mu.Unlock()
	if full {
		p.discard(sp)
	}
}

// discard closes sp's file and removes it.
func (p *sparePool) discard(sp spare) {
	if sp.f != nil {
		_ = sp.f.close()
	}
	_ = p.dir.remove(sp.name)
}

// closeAll closes the spares' files (Close; New removes them).
func (p *sparePool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sp := range p.free {
		if sp.f != nil {
			_ = sp.f.close()
		}
	}
	p.free = nil
}

// pinSet counts the readers holding each object file open (by file name).
// A reader pins the name before opening it; a writer that swapped the
// name's old file out looks after the swap, so it sees every reader that
// may hold the old file, and removes instead of reusing a file some
// reader still reads (TestReaderKeepsVersionAcrossTwoReplaces).
type pinSet struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *pinSet) pin(name string) {
	p.mu.Lock()
	if p.n == nil {
		p.n = map[string]int{}
	}
	p.n[name]++
	p.mu.Unlock()
}

func (p *pinSet) unpin(name string) {
	p.mu.Lock()
	if p.n[name]--; p.n[name] <= 0 {
		delete(p.n, name)
	}
	p.mu.Unlock()
}

func (p *pinSet) pinned(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[name] > 0
}

// writeSpare fills a spare (reused, or a new temp file) with the body and
// its trailer and fdatasyncs it; the spare's file stays open (it becomes
// the object's, held in known, once swapped in). A small body is read
// first and written with the trailer in one write at offset 0; a reused
// file longer than the new contents is truncated to them. For a small
// body the write and its sync run under a directory-sync ticket (Enter,
// returned for Put to end) when ticketed, so a directory fsync about to
// begin waits a moment for this rename too (Stage's rename may come long
// after: it takes none).
func (s *Store) writeSpare(ctx context.Context, req fencegate.PutRequest, ticketed bool) (_ spare, etag string, ticket uint64, err error) {
	ct := req.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	meta := req.Metadata()
	var sp spare // not the result: a failed write returns none, and discards sp
	reused := false
	if p, ok := s.spares.take(); ok {
		sp = p
		if sp.f == nil {
			var oerr error
			if sp.f, oerr = s.d.openW(sp.name); oerr != nil {
				_ = s.d.remove(sp.name)
			}
		}
		reused = sp.f != nil
	}
	if !reused {
		f, name, cerr := s.d.create()
		if cerr != nil {
			return spare{}, "", 0, s.unavailable(cerr, "create temp file for", req.Key)
		}
		sp = spare{name: name, f: f}
	}
	// Given up unless filled: on an error, and on a panic (a body whose
	// Read panics, say), which goes on to the caller without its file.
	filled := false
	defer func() {
		if !filled {
			s.dirs.Leave(ticket)
			s.spares.discard(sp)
		}
	}()
	var (
		n   int64
		buf []byte
		sum [sha256.Size]byte
	)
	src := io.LimitReader(ctxReader{ctx, req.Body}, req.Size+1)
	switch {
	case req.Body == nil:
		sum = sha256.Sum256(nil)
	case req.Size <= smallBody:
		bp := getBuf(int(req.Size) + 1 + 1024)
		defer putBuf(bp, &buf)
		buf = (*bp)[:req.Size+1]
		var m int
		m, err = io.ReadFull(src, buf)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = nil
		}
		n, buf = int64(m), buf[:m]
		sum = sha256.Sum256(buf)
	default:
		h := sha256.New()
		n, err = io.Copy(io.MultiWriter(&offsetWriter{f: sp.f}, h), src)
		h.Sum(sum[:0])
	}
	if err != nil {
		if ctx.Err() != nil {
			return spare{}, "", ticket, cancelled(err, "put")
		}
		return spare{}, "", ticket, s.unavailable(err, "write", req.Key)
	}
	if n != req.Size {
		return spare{}, "", ticket, fencegate.Errorf(fencegate.CodeInvalidRequest, "put of %q: body has %d bytes, size says %d", req.Key, n, req.Size)
	}
	etag = newETag(sum)
	tr := trailer{Key: req.Key, ETag: etag, Size: n, ContentType: ct, Metadata: meta, Modified: s.now().UTC()}
	if buf, err = encodeTrailer(buf, n, tr, sp.len); err != nil {
		return spare{}, "", ticket, fencegate.Wrap(err, fencegate.CodeInternal, "encode object trailer")
	}
	at := int64(0)
	if req.Size > smallBody {
		at = n
	} else if ticketed {
		ticket = s.dirs.Enter()
	}
	if err = sp.f.writeAt(buf, at); err != nil {
		return spare{}, "", ticket, s.unavailable(err, "write", req.Key)
	}
	end := at + int64(len(buf))
	if reused && sp.len != end { // cut the old tail (when longer: a no-op, in case sp.len is wrong)
		if err = sp.f.truncate(end); err != nil {
			return spare{}, "", ticket, s.unavailable(err, "truncate", req.Key)
		}
	}
	s.fileSyncs.Add(1)
	if err = sp.f.datasync(); err != nil {
		return spare{}, "", ticket, s.unavailable(err, "sync", req.Key)
	}
	sp.len = end
	filled = true
	return sp, etag, ticket, nil
}

// newETag is "<hex digest>-<16 hex random write id>" (package doc).
func newETag(sum [sha256.Size]byte) string {
	var id [8]byte
	_, _ = rand.Read(id[:])
	var e [1 + 2*sha256.Size + 1 + 2*len(id) + 1]byte
	e[0] = '"'
	hex.Encode(e[1:], sum[:])
	e[1+2*sha256.Size] = '-'
	hex.Encode(e[2+2*sha256.Size:], id[:])
	e[len(e)-1] = '"'
	return string(e[:])
}

// maxPooledBuf: a buffer that grew past this (a large trailer) is left to
// the collector, so the pool holds little memory.
const maxPooledBuf = smallBody + 8<<10

// bufPool holds the buffers small bodies are read into, with their
// trailer, so a steady Put allocates none.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// getBuf returns a pooled buffer of capacity at least n.
func getBuf(n int) *[]byte {
	bp := bufPool.Get().(*[]byte)
	if cap(*bp) < n {
		*bp = make([]byte, 0, n)
	}
	return bp
}

// putBuf returns bp to the pool, keeping *grown (the buffer as used, maybe
// reallocated by appends) when it is larger. Nothing may use it after.
func putBuf(bp *[]byte, grown *[]byte) {
	if cap(*grown) > cap(*bp) {
		*bp = *grown
	}
	if cap(*bp) > maxPooledBuf {
		return
	}
	*bp = (*bp)[:0]
	bufPool.Put(bp)
}

// offsetWriter writes a streamed body into f from offset 0 on.
type offsetWriter struct {
	f   *wfile
	off int64
}

func (w *offsetWriter) Write(p []byte) (int, error) {
	if err := w.f.writeAt(p, w.off); err != nil {
		return 0, err
	}
	w.off += int64(len(p))
	return len(p), nil
}
