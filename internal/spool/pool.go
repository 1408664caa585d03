package spool

import (
	"bytes"
	"errors"
	"io"
	"sync"

	"golang.org/x/sync/semaphore"
)

// Pool lends buffers for bodies of at most limit bytes, within a budget of
// bytes held at once; a body it cannot take goes to a file instead (nobody
// waits for memory). It is safe for concurrent use; one Pool shared by
// several readers keeps one budget for all of them.
type Pool struct {
	limit  int64 // 0: no body is held in memory
	budget *semaphore.Weighted
	bufs   sync.Pool // *bytes.Buffer
}

// NewPool returns a pool for bodies of at most limit bytes within budget
// bytes held at once; limit <= 0 or budget < limit: every body goes to a
// file.
func NewPool(limit, budget int64) *Pool {
	if limit <= 0 || budget < limit {
		return &Pool{}
	}
	return &Pool{limit: limit, budget: semaphore.NewWeighted(budget)}
}

// get lends an empty buffer for a body of declared bytes (-1 unknown), and
// how much of the budget it holds; nil when the body goes to a file.
func (p *Pool) get(declared int64) (*bytes.Buffer, int64) {
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
func (p *Pool) put(buf *bytes.Buffer, held int64) {
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
