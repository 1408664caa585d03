package local

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

const (
	magic      = "FGO1"
	tailLen    = 4 + len(magic) // uint32 trailer length + magic
	maxTrailer = 1 << 20
	// padTo rounds an object file's length up, with spaces after the
	// trailer's JSON (which a decoder skips), so that rewriting an object
	// with a few more or fewer digits of metadata keeps a reused file's
	// length: its fdatasync then has no inode to write.
	padTo = 128
	// maxPad is how much longer than needed a reused file may stay
	// rather than be truncated.
	maxPad = 1024
)

// trailer is the per-object record stored after the body.
type trailer struct {
	Key         string            `json:"key"`
	ETag        string            `json:"etag"`
	Size        int64             `json:"size"`
	ContentType string            `json:"content_type"`
	Metadata    map[string]string `json:"metadata"`
	// Modified is when the write landed. It travels with the bytes (the
	// file's mtime is not made durable by fdatasync, and a reused file's
	// says nothing); files written before it existed use their mtime.
	Modified time.Time `json:"modified,omitzero"`
	modTime  time.Time // Modified, else the file's mtime
	fileLen  int64     // the object file's length
}

// encodeTrailer appends tr and its length and magic to buf, which holds
// the body's n bytes (or nothing, when the body was streamed), padding the
// file to padTo, or to reuse (a reused file's length) when that is at
// most maxPad longer. It refuses a trailer whose JSON is longer than
// maxTrailer, which readTrailer would refuse (PutRequest.Validate's bounds
// refuse such a write before anything is written; this is the last guard).
func encodeTrailer(buf []byte, n int64, tr trailer, reuse int64) ([]byte, error) {
	start := len(buf)
	buf, err := appendTrailerJSON(buf, tr)
	if err != nil {
		return nil, err
	}
	if len(buf)-start > maxTrailer {
		return nil, fmt.Errorf("trailer of %d bytes, at most %d are read back", len(buf)-start, maxTrailer)
	}
	base := n + int64(len(buf)-start+tailLen)
	target := (base + padTo - 1) / padTo * padTo
	if reuse >= base && reuse-base <= maxPad {
		target = reuse
	}
	for range target - base {
		buf = append(buf, ' ')
	}
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(buf)-start))
	return append(buf, magic...), nil
}

// readTrailerAt reads the trailer of the file at name in the objects
// directory.
func (s *Store) readTrailerAt(name string) (trailer, error) {
	f, err := s.d.openR(name)
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
	if n > maxTrailer+maxPad || n > end-int64(tailLen) {
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
	tr.modTime, tr.fileLen = tr.Modified.UTC(), end
	if tr.Modified.IsZero() {
		tr.modTime = st.ModTime().UTC()
	}
	return tr, nil
}
