// Package spool copies a request body to a temporary file while hashing it,
// so that its digest is known before the write is admitted and the body can
// be forwarded (and re-read on retries) with flat memory. Both HTTP surfaces
// (handlers, s3door) spool through it.
package spool

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"

	"github.com/fencegate/fencegate"
)

// File is a spooled body, rewound to its start. Close removes it.
type File struct {
	*os.File
	// Size is the body's length in bytes.
	Size int64
	// SHA256 is the body's SHA-256.
	SHA256 []byte
}

// Digest is the payload digest of the body: "sha256:<hex>".
func (f *File) Digest() string { return "sha256:" + hex.EncodeToString(f.SHA256) }

// Copy reads r to its end into a new file in dir, feeding every byte to the
// SHA-256 and to each of also (further hashes the caller checks). A body
// longer than max bytes is INVALID_REQUEST and nothing is kept; so is a read
// error (the cause is kept for errors.Is / errors.As).
func Copy(dir string, r io.Reader, max int64, also ...io.Writer) (*File, error) {
	f, err := os.CreateTemp(dir, "body-*")
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInternal, "cannot spool the request body")
	}
	out := &File{File: f}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(append([]io.Writer{f, h}, also...)...), io.LimitReader(r, max+1))
	if err == nil && n > max {
		err = fencegate.Errorf(fencegate.CodeInvalidRequest, "request body exceeds the limit of %d bytes", max)
	}
	if err != nil {
		out.Close()
		var fe *fencegate.Error
		if errors.As(err, &fe) {
			return nil, err
		}
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "reading the request body failed")
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		out.Close()
		return nil, fencegate.Wrap(err, fencegate.CodeInternal, "cannot rewind the spooled body")
	}
	out.Size, out.SHA256 = n, h.Sum(nil)
	return out, nil
}

// Keep returns the body for a quarantine record when it is at most max
// bytes (nil, nil when larger), read without moving the file's offset.
func (f *File) Keep(max int64) func() ([]byte, error) {
	return func() ([]byte, error) {
		if f.Size > max {
			return nil, nil
		}
		b := make([]byte, f.Size)
		if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return b, nil
	}
}

// Close closes and removes the file.
func (f *File) Close() {
	if f != nil && f.File != nil {
		name := f.Name()
		_ = f.File.Close()
		_ = os.Remove(name)
	}
}
