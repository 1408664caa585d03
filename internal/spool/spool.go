// Package spool reads a request body once, to its end, while hashing it, so
// that its digest is known before the write is admitted and the body can be
// forwarded (and re-read on retries). A small body is held in a buffer lent
// by a Pool, within the Pool's memory budget; any other body goes to a
// temporary file, so memory stays flat however large the body. Both HTTP
// surfaces (handlers, s3door) read bodies through it.
package spool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"sync"

	"github.com/fencegate/fencegate"
)

// Body is a body read to its end, positioned at its start. Close removes its
// file or gives its buffer back to the pool; a reader of it kept past Close
// reads an error, never another body's bytes.
type Body struct {
	// mu orders Keep's read against Close: a fence store may read a
	// quarantine payload from its batch after the request that owns the
	// body has given up and closed it.
	mu   sync.Mutex
	file *os.File   // nil for a body in memory
	mem  *memReader // nil for a body in a file
	pool *Pool
	held int64 // bytes of the pool's budget this body holds
	// Size is the body's length in bytes.
	Size int64
	// SHA256 is the body's SHA-256.
	SHA256 []byte
}

// Digest is the payload digest of the body: "sha256:<hex>".
func (b *Body) Digest() string {
	if len(b.SHA256) != sha256.Size {
		return "sha256:" + hex.EncodeToString(b.SHA256)
	}
	var out [len("sha256:") + 2*sha256.Size]byte
	copy(out[:], "sha256:")
	hex.Encode(out[7:], b.SHA256)
	return string(out[:]) // one allocation, not two
}

// Reader is what the effect forwards from (io.ReadSeeker, and io.ReaderAt).
func (b *Body) Reader() io.ReadSeeker {
	if b.mem != nil {
		return b.mem
	}
	return b.file
}

// File is the body's temporary file, nil when the body is in memory (a
// body read by Copy is always in a file).
func (b *Body) File() *os.File { return b.file }

// InMemory reports whether the body is held in a pool's buffer.
func (b *Body) InMemory() bool { return b.mem != nil }

// Keep returns the body for a quarantine record when it is at most max
// bytes (nil, nil when larger), read without moving the offset the effect
// reads from. Called after Close (from a batch still deciding a write its
// request gave up on), it answers an error, never another body's bytes.
func (b *Body) Keep(max int64) func() ([]byte, error) {
	return func() ([]byte, error) {
		if b.Size > max {
			return nil, nil
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.mem == nil && b.file == nil {
			return nil, fencegate.Errorf(fencegate.CodeInternal, "the body was closed before its quarantine copy was read")
		}
		out := make([]byte, b.Size)
		var err error
		if b.mem != nil {
			_, err = b.mem.ReadAt(out, 0)
		} else {
			_, err = b.file.ReadAt(out, 0)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return out, nil
	}
}

// Close removes the temporary file or gives the buffer back to the pool.
func (b *Body) Close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.file != nil {
		name := b.file.Name()
		_ = b.file.Close()
		_ = os.Remove(name)
		b.file = nil
	}
	if b.mem != nil {
		b.pool.put(b.mem.release(), b.held)
		b.mem = nil
	}
}

// Copy reads r into a new file in dir (never into memory): Read with no pool.
func Copy(dir string, r io.Reader, max int64, also ...io.Writer) (*Body, error) {
	return (*Pool)(nil).Read(dir, r, -1, max, also...)
}

// Read reads r to its end, feeding every byte to the SHA-256 and to each of
// also (further hashes the caller checks), into a buffer of p when the body
// fits p's bound (declared is its announced length, -1 unknown) and p's
// budget allows, else into a new file in dir. A body longer than max bytes
// (or one an http.MaxBytesReader cut) is INVALID_REQUEST and nothing is
// kept; so is a read error (the cause is kept for errors.Is / errors.As).
// A nil p holds nothing in memory.
func (p *Pool) Read(dir string, r io.Reader, declared, max int64, also ...io.Writer) (*Body, error) {
	h := sha256.New()
	var w io.Writer = h
	if len(also) > 0 {
		w = io.MultiWriter(append([]io.Writer{h}, also...)...)
	}
	b := &Body{pool: p}
	n, err := b.read(declared, &io.LimitedReader{R: r, N: max + 1}, w, dir)
	if err == nil && n > max {
		err = fencegate.Errorf(fencegate.CodeInvalidRequest, "request body exceeds the limit of %d bytes", max)
	}
	if err != nil {
		b.Close()
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "request body exceeds the limit of %d bytes", mbe.Limit)
		}
		var fe *fencegate.Error
		if errors.As(err, &fe) {
			return nil, err
		}
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "reading the request body failed")
	}
	if b.file != nil {
		if _, err := b.file.Seek(0, io.SeekStart); err != nil {
			b.Close()
			return nil, fencegate.Wrap(err, fencegate.CodeInternal, "cannot rewind the spooled body")
		}
	}
	b.Size, b.SHA256 = n, h.Sum(nil)
	return b, nil
}

// copyBufs are io.CopyBuffer's buffers for bodies that go to a file (io.Copy
// would allocate 32 KiB per body).
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// read copies src into memory, or, once it is over what it took from the
// pool's budget (the bound, or its declared length) or the budget is spent,
// into a file in dir; every byte read is written to w
// (the hashes) exactly once, in order. A body in memory is read straight
// into the pool's buffer and hashed from there, with no copy buffer.
func (b *Body) read(declared int64, src io.Reader, w io.Writer, dir string) (int64, error) {
	var n int64
	if buf, held := b.pool.get(declared); buf != nil {
		b.held = held
		if declared >= 0 {
			buf.Grow(int(declared) + bytes.MinRead) // one read past the end finds EOF without growing
		}
		// Read one byte past what the budget lent (the bound, or the
		// declared length) to learn whether the body fits: one longer than
		// it declared goes to the file, never into memory the budget did
		// not count.
		m, err := buf.ReadFrom(&io.LimitedReader{R: src, N: held + 1})
		n = m
		if _, werr := w.Write(buf.Bytes()); werr != nil && err == nil {
			err = werr
		}
		if err != nil || m <= held {
			b.mem = newMemReader(buf)
			return n, err
		}
		// Too large after all: what was read goes to the file first.
		if err := b.create(dir); err != nil {
			b.pool.put(buf, held)
			b.held = 0
			return n, err
		}
		_, err = spoolFile{b.file}.Write(buf.Bytes())
		b.pool.put(buf, held)
		b.held = 0
		if err != nil {
			return n, err
		}
	} else if err := b.create(dir); err != nil {
		return 0, err
	}
	cb := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(cb)
	m, err := io.CopyBuffer(io.MultiWriter(spoolFile{b.file}, w), src, *cb)
	return n + m, err
}

// spoolFile is the spool file as the body's copy writes it: a failed write
// (a full disk) is the gateway's INTERNAL, not the client's malformed body.
type spoolFile struct{ f *os.File }

func (s spoolFile) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	if err != nil {
		err = fencegate.Wrap(err, fencegate.CodeInternal, "cannot spool the request body")
	}
	return n, err
}

// createTemp creates a spool file (os.CreateTemp; tests replace it).
var createTemp = os.CreateTemp

func (b *Body) create(dir string) error {
	f, err := createTemp(dir, "body-*")
	if err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "cannot spool the request body")
	}
	b.file = f
	return nil
}
