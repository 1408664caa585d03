package handlers

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/fencegate/fencegate"
)

// spooled is a request body copied to a temporary file while its SHA-256 was
// computed, so the payload digest is known before admission and the body can
// be forwarded (and re-read on retries) with flat memory.
type spooled struct {
	file   *os.File
	size   int64
	digest string // "sha256:<hex>"
}

// keep returns the body for a quarantine record when it is at most max
// bytes (nil, nil when larger), read from the file without moving the offset
// the effect reads from.
func (s *spooled) keep(max int64) func() ([]byte, error) {
	return func() ([]byte, error) {
		if s.size > max {
			return nil, nil
		}
		b := make([]byte, s.size)
		if _, err := s.file.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		return b, nil
	}
}

// Close removes the temporary file.
func (s *spooled) Close() {
	if s.file != nil {
		name := s.file.Name()
		_ = s.file.Close()
		_ = os.Remove(name)
	}
}

// spool reads r's body (at most max bytes) into a file in dir, checks any
// Content-Digest (sha-256) or x-amz-checksum-sha256 the client sent, and
// rewinds the file.
func spool(r *http.Request, dir string, max int64) (*spooled, error) {
	f, err := os.CreateTemp(dir, "body-*")
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInternal, "cannot spool the request body")
	}
	s := &spooled{file: f}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), http.MaxBytesReader(nil, r.Body, max))
	if err != nil {
		s.Close()
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "request body exceeds the limit of %d bytes", max)
		}
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "reading the request body failed")
	}
	if err := checkClientDigest(r.Header, h); err != nil {
		s.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		s.Close()
		return nil, fencegate.Wrap(err, fencegate.CodeInternal, "cannot rewind the spooled body")
	}
	s.size = n
	s.digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return s, nil
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
