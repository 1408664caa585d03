package s3door

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// aws-chunked bodies (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming.html
// and .../sigv4-streaming-trailers.html):
//
//	<hex size>[;chunk-signature=<sig>]\r\n<bytes>\r\n ... 0[;chunk-signature=<sig>]\r\n
//	[<trailer>:<value>\r\n ...]\r\n
//
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD signs every chunk, chained on the
// header signature; STREAMING-UNSIGNED-PAYLOAD-TRAILER (the SDKs' default
// for a checksum trailer) signs no chunk and ends with the checksum trailer
// named by x-amz-trailer. The signed-trailer variant is NotImplemented.

const (
	maxChunkLine   = 4096
	maxSignedChunk = 16 << 20 // a signed chunk is buffered to be verified
	maxTrailers    = 16
)

// dechunker decodes an aws-chunked body as it is read.
type dechunker struct {
	ctx      context.Context
	in       *bufio.Reader
	a        *authed
	ss       *v4.StreamSigner // nil: unsigned chunks
	left     int64            // bytes left in the current unsigned chunk
	buf      []byte           // verified bytes of a signed chunk not yet read
	chunk    bytes.Buffer     // a signed chunk as it arrives (buf is its tail)
	done     bool
	trailers map[string]string
}

func newDechunker(ctx context.Context, body io.Reader, a *authed, signed bool) *dechunker {
	d := &dechunker{ctx: ctx, in: bufio.NewReaderSize(body, 64<<10), a: a, trailers: map[string]string{}}
	if signed {
		d.ss = a.chunkSigner()
	}
	return d
}

func malformed(msg string) error {
	return s3err(http.StatusBadRequest, "IncompleteBody", "aws-chunked body: "+msg)
}

func (d *dechunker) line() (string, error) {
	var sb strings.Builder
	for {
		frag, err := d.in.ReadSlice('\n')
		sb.Write(frag)
		if sb.Len() > maxChunkLine {
			return "", malformed("line too long")
		}
		if err == nil {
			break
		}
		if err != bufio.ErrBufferFull {
			return "", malformed("truncated")
		}
	}
	l, ok := strings.CutSuffix(sb.String(), "\r\n")
	if !ok {
		return "", malformed("line not ended by CRLF")
	}
	return l, nil
}

func (d *dechunker) Read(p []byte) (int, error) {
	for {
		switch {
		case len(d.buf) > 0:
			n := copy(p, d.buf)
			d.buf = d.buf[n:]
			return n, nil
		case d.left > 0:
			n, err := d.in.Read(p[:min(int64(len(p)), d.left)])
			d.left -= int64(n)
			if err == io.EOF {
				return n, malformed("truncated chunk")
			}
			if err == nil && d.left == 0 {
				err = d.crlf()
			}
			return n, err
		case d.done:
			return 0, io.EOF
		}
		if err := d.next(); err != nil {
			return 0, err
		}
	}
}

func (d *dechunker) crlf() error {
	var b [2]byte
	if _, err := io.ReadFull(d.in, b[:]); err != nil || string(b[:]) != "\r\n" {
		return malformed("chunk not followed by CRLF")
	}
	return nil
}

// next reads a chunk header (and, signed, the whole chunk).
func (d *dechunker) next() error {
	l, err := d.line()
	if err != nil {
		return err
	}
	sizeHex, ext, _ := strings.Cut(l, ";")
	size, err := strconv.ParseInt(sizeHex, 16, 64)
	if err != nil || size < 0 {
		return malformed("bad chunk size")
	}
	if d.ss == nil {
		if size == 0 {
			return d.finish()
		}
		d.left = size
		return nil
	}
	sig, ok := strings.CutPrefix(ext, "chunk-signature=")
	if !ok {
		return malformed("chunk without chunk-signature")
	}
	if size > maxSignedChunk {
		return malformed("signed chunk larger than 16 MiB")
	}
	// The chunk is buffered as its bytes arrive, not by the size its header
	// announces: a client announcing 16 MiB and trickling a few bytes holds
	// a few bytes' worth of memory, not 16 MiB (the buffer is reused for
	// the next chunk, whose bytes are read once this one's are).
	d.chunk.Reset()
	if n, err := io.CopyN(&d.chunk, d.in, size); err != nil || n != size {
		return malformed("truncated chunk")
	}
	chunk := d.chunk.Bytes()
	if !equalHex(d.a.chunkSignature(d.ctx, d.ss, chunk), sig) {
		return signatureMismatch()
	}
	if size == 0 {
		return d.finish()
	}
	d.buf = chunk
	return d.crlf()
}

// finish reads the trailers after the last chunk, up to the empty line.
func (d *dechunker) finish() error {
	d.done = true
	for range maxTrailers + 1 {
		l, err := d.line()
		if err != nil {
			return err
		}
		if l == "" {
			return nil
		}
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			return malformed("bad trailer")
		}
		d.trailers[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	return malformed("too many trailers")
}
