package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/fencegate/fencegate"
)

// spooled is a request body read once while its SHA-256 was computed, so the
// payload digest is known before admission and the body can be forwarded
// (and re-read on retries). A body of at most the memory bound (Server.
// MemoryBody) is held in a buffer of the server's bodyPool when the pool's
// budget allows; any other body is spooled to a temporary file, so memory
// stays flat however large the body.
type spooled struct {
	file   *os.File   // nil for a body in memory
	mem    *memReader // nil for a body in a file
	pool   *bodyPool
	held   int64 // bytes of the pool's budget this body holds
	size   int64
	digest string // "sha256:<hex>"
}

// body is the reader the effect forwards from, positioned at the start.
func (s *spooled) body() io.ReadSeeker {
	if s.mem != nil {
		return s.mem
	}
	return s.file
}

// keep returns the body for a quarantine record when it is at most max
// bytes (nil, nil when larger), read without moving the offset the effect
// reads from.
func (s *spooled) keep(max int64) func() ([]byte, error) {
	return func() ([]byte, error) {
		if s.size > max {
			return nil, nil
		}
		b := make([]byte, s.size)
		var err error
		if s.mem != nil {
			_, err = s.mem.ReadAt(b, 0)
		} else {
			_, err = s.file.ReadAt(b, 0)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return b, nil
	}
}

// Close removes the temporary file or gives the buffer back to the pool.
func (s *spooled) Close() {
	if s.file != nil {
		name := s.file.Name()
		_ = s.file.Close()
		_ = os.Remove(name)
		s.file = nil
	}
	if s.mem != nil {
		s.pool.put(s.mem.release(), s.held)
		s.mem = nil
	}
}

// spool reads r's body (at most max bytes) into memory or a file in dir,
// computing its SHA-256 as it reads, checks any Content-Digest (sha-256) or
// x-amz-checksum-sha256 the client sent, and leaves the body at its start.
func (s *Server) spool(r *http.Request, max int64) (*spooled, error) {
	src := http.MaxBytesReader(nil, r.Body, max)
	h := sha256.New()
	sp := &spooled{pool: s.bodies}
	n, err := sp.read(r.ContentLength, src, h, s.SpoolDir)
	if err != nil {
		sp.Close()
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "request body exceeds the limit of %d bytes", max)
		}
		var fe *fencegate.Error
		if errors.As(err, &fe) {
			return nil, err
		}
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "reading the request body failed")
	}
	if err := checkClientDigest(r.Header, h); err != nil {
		sp.Close()
		return nil, err
	}
	if sp.file != nil {
		if _, err := sp.file.Seek(0, io.SeekStart); err != nil {
			sp.Close()
			return nil, fencegate.Wrap(err, fencegate.CodeInternal, "cannot rewind the spooled body")
		}
	}
	sp.size = n
	sp.digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return sp, nil
}

// read copies src into h and into memory, or, once it is over the pool's
// bound (or the budget is spent), into a file in dir.
func (sp *spooled) read(declared int64, src io.Reader, h hash.Hash, dir string) (int64, error) {
	var n int64
	if buf, held := sp.pool.get(declared); buf != nil {
		sp.held = held
		// Read one byte past the bound to learn whether the body fits.
		m, err := io.Copy(io.MultiWriter(buf, h), io.LimitReader(src, sp.pool.limit+1))
		n = m
		if err != nil {
			sp.mem = newMemReader(buf)
			return n, err
		}
		if m <= sp.pool.limit {
			sp.mem = newMemReader(buf)
			return n, nil
		}
		// Too large after all: what was read goes to the file first.
		if err := sp.create(dir); err != nil {
			sp.pool.put(buf, held)
			return n, err
		}
		_, err = sp.file.Write(buf.Bytes())
		sp.pool.put(buf, held)
		if err != nil {
			return n, fencegate.Wrap(err, fencegate.CodeInternal, "cannot spool the request body")
		}
	} else if err := sp.create(dir); err != nil {
		return 0, err
	}
	m, err := io.Copy(io.MultiWriter(sp.file, h), src)
	return n + m, err
}

func (sp *spooled) create(dir string) error {
	f, err := os.CreateTemp(dir, "body-*")
	if err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "cannot spool the request body")
	}
	sp.file = f
	return nil
}

// bodyPool lends buffers for bodies of at most limit bytes, within a budget
// of bytes held at once; a body it cannot take is spooled instead (nobody
// waits for memory).
type bodyPool struct {
	limit  int64 // 0: no body is held in memory
	budget *semaphore.Weighted
	bufs   sync.Pool // *bytes.Buffer
}

func newBodyPool(limit, budget int64) *bodyPool {
	if limit <= 0 || budget < limit {
		return &bodyPool{}
	}
	return &bodyPool{limit: limit, budget: semaphore.NewWeighted(budget)}
}

// get lends an empty buffer for a body of declared bytes (-1 unknown), and
// how much of the budget it holds; nil when the body goes to a file.
func (p *bodyPool) get(declared int64) (*bytes.Buffer, int64) {
	if p == nil || p.limit == 0 || declared > p.limit {
		return nil, 0
	}
	held := p.limit
	if declared >= 0 {
		held = declared
	}
	if !p.budget.TryAcquire(held) {
		return nil, 0
	}
	buf, _ := p.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	buf.Reset()
	return buf, held
}

// put takes a buffer back (nil for none) and returns its share of the budget.
func (p *bodyPool) put(buf *bytes.Buffer, held int64) {
	if buf != nil && int64(buf.Cap()) <= 2*p.limit {
		p.bufs.Put(buf)
	}
	p.budget.Release(held)
}

// memReader is a body in memory. After release, reads fail: a reader still
// held by someone (an HTTP transport may read a request body after its
// round trip has returned) can never see the bytes of the buffer's next use.
type memReader struct {
	mu  sync.Mutex
	buf *bytes.Buffer // nil once released
	off int64
}

func newMemReader(buf *bytes.Buffer) *memReader { return &memReader{buf: buf} }

var errBodyReleased = errors.New("request body already released")

// Read implements io.Reader.
func (m *memReader) Read(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.buf == nil {
		return 0, errBodyReleased
	}
	b := m.buf.Bytes()
	if m.off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[m.off:])
	m.off += int64(n)
	return n, nil
}

// ReadAt implements io.ReaderAt.
func (m *memReader) ReadAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.buf == nil {
		return 0, errBodyReleased
	}
	b := m.buf.Bytes()
	if off >= int64(len(b)) {
		return 0, io.EOF
	}
	n := copy(p, b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Seek implements io.Seeker.
func (m *memReader) Seek(offset int64, whence int) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.buf == nil {
		return 0, errBodyReleased
	}
	switch whence {
	case io.SeekCurrent:
		offset += m.off
	case io.SeekEnd:
		offset += int64(m.buf.Len())
	}
	if offset < 0 {
		return 0, errors.New("seek before the start of the body")
	}
	m.off = offset
	return offset, nil
}

// release ends the reader and returns its buffer.
func (m *memReader) release() *bytes.Buffer {
	m.mu.Lock()
	defer m.mu.Unlock()
	buf := m.buf
	m.buf = nil
	return buf
}

// checkClientDigest compares a client-declared SHA-256 with the computed one.
func checkClientDigest(hd http.Header, h hash.Hash) error {
	sum := h.Sum(nil)
	if v := hd.Get("x-amz-checksum-sha256"); v != "" {
		want, err := base64.StdEncoding.DecodeString(v)
		if err != nil || string(want) != string(sum) {
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "x-amz-checksum-sha256 does not match the body")
		}
	}
	if v := hd.Get("Content-Digest"); v != "" {
		for _, item := range strings.Split(v, ",") {
			alg, val, ok := strings.Cut(strings.TrimSpace(item), "=")
			if !ok || strings.ToLower(alg) != "sha-256" {
				continue
			}
			want, err := base64.StdEncoding.DecodeString(strings.Trim(val, ":"))
			if err != nil || string(want) != string(sum) {
				return fencegate.Errorf(fencegate.CodeInvalidRequest, "Content-Digest sha-256 does not match the body")
			}
		}
	}
	return nil
}

// emptyDigest is the payload digest of a request without a body.
const emptyDigest = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
