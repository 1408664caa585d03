package s3door

import (
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/spool"
)

// Request bodies: how one is framed (framing, decided once per request)
// and its reading into the spool, decoded and checked (readBody).

// framing is how a request's body arrives, decided once per request from
// its signed x-amz-content-sha256 and headers: whether it is aws-chunked
// (awsChunked) and the length it announces once decoded (declaredLength,
// -1 unknown). An UploadPart sizes its staging charge (partRoom) and reads
// its body (part) by the one framing.
type framing struct {
	chunked  bool
	declared int64
}

// framingOf decides r's framing; a streaming form the door does not
// implement is NotImplemented.
//
// A body declared aws-chunked (Content-Encoding) whose payload hash is no
// STREAMING-* form is NotImplemented: nothing says how to decode it, and
// read as sent it would be kept with its chunk framing (S3 pairs the coding
// with a STREAMING-* x-amz-content-sha256: "Signature Calculations for the
// Authorization Header: Transferring Payload in Multiple Chunks").
func framingOf(r *http.Request) (framing, error) {
	chunked, err := awsChunked(authOf(r))
	if err != nil {
		return framing{}, err
	}
	if !chunked && declaredAWSChunked(r) {
		return framing{}, notImplemented("Content-Encoding aws-chunked without a STREAMING-* x-amz-content-sha256 (the body would be kept with its chunk framing)")
	}
	return framing{chunked: chunked, declared: declaredLength(r, chunked)}, nil
}

// declaredAWSChunked reports whether r's Content-Encoding names aws-chunked.
func declaredAWSChunked(r *http.Request) bool {
	for _, c := range contentCodings(r) {
		if strings.EqualFold(c, "aws-chunked") {
			return true
		}
	}
	return false
}

// contentCodings are the codings r's Content-Encoding names, over all its
// lines (a list field, RFC 9110 §8.4), trimmed, empty ones left out.
func contentCodings(r *http.Request) []string {
	if len(r.Header.Values("Content-Encoding")) == 0 {
		return nil // most writes: nothing to split
	}
	var cs []string
	for _, c := range strings.Split(headerValue(r.Header, "Content-Encoding"), ",") {
		if c = strings.TrimSpace(c); c != "" {
			cs = append(cs, c)
		}
	}
	return cs
}

// body reads a request body: aws-chunked decoded (and its chunk signatures
// verified), spooled with its SHA-256, and checked against Content-MD5,
// x-amz-checksum-* and a hex x-amz-content-sha256. It returns the
// verified checksum header value, if one was declared.
func (s *Server) body(r *http.Request, alsoMD5 io.Writer) (*spool.Body, string, string, error) {
	fr, err := framingOf(r)
	if err != nil {
		return nil, "", "", err
	}
	return s.readBody(r, fr, s.Bodies, alsoMD5, r.Header, s.MaxBody)
}

// part reads an UploadPart body framed as fr (which partRoom sized) as body
// does, always into a file: it is staged by renaming that file.
func (s *Server) part(r *http.Request, fr framing, alsoMD5 io.Writer) (*spool.Body, string, string, error) {
	return s.readBody(r, fr, nil, alsoMD5, r.Header, s.MaxBody)
}

// maxDocument bounds the XML document of DeleteObjects and
// CompleteMultipartUpload (S3 allows 1,000 keys and 10,000 parts): a larger
// one is refused as it arrives, not spooled.
const maxDocument = 4 << 20

// document reads a request's XML document (DeleteObjects, Complete...).
// Its Content-MD5 is checked against it; so are its x-amz-checksum-*
// headers when ofDocument (DeleteObjects, whose checksum S3 defines as the
// request body's), while CompleteMultipartUpload's describe the object and
// are left to the caller.
func (s *Server) document(r *http.Request, ofDocument bool) (*spool.Body, error) {
	hd := r.Header
	if !ofDocument {
		hd = http.Header{}
		for k, v := range r.Header {
			if !strings.HasPrefix(strings.ToLower(k), "x-amz-checksum-") {
				hd[k] = v
			}
		}
	}
	fr, err := framingOf(r)
	if err != nil {
		return nil, err
	}
	f, _, _, err := s.readBody(r, fr, nil, nil, hd, maxDocument)
	if fencegate.ErrorCode(err) == fencegate.CodeInvalidRequest {
		return nil, s3err(http.StatusBadRequest, "MalformedXML", "The XML you provided was larger than "+strconv.Itoa(maxDocument)+" bytes or could not be read.")
	}
	return f, err
}

// readBody reads r's body, framed as fr, into pool (a file when nil),
// within max, checked against the integrity headers in hd.
func (s *Server) readBody(r *http.Request, fr framing, pool *spool.Pool, alsoMD5 io.Writer, hd http.Header, max int64) (*spool.Body, string, string, error) {
	a := authOf(r)
	var in io.Reader = r.Body
	var dc *dechunker
	if fr.chunked {
		dc = newDechunker(r.Context(), r.Body, a, a.payloadHash == streamingSigned)
		in = dc
	}
	integ, err := readIntegrity(hd, dc != nil)
	if err != nil {
		return nil, "", "", err
	}
	also := integ.writers()
	if alsoMD5 != nil {
		also = append(also, alsoMD5)
	}
	declared := fr.declared
	if dc != nil && declared >= 0 {
		// Go's server holds a plain body to its Content-Length; a decoded
		// aws-chunked one is held here to its declared length, so that it
		// cannot outgrow what was reserved for it (a part's staging charge)
		// before its length is compared.
		in = &declaredReader{r: in, left: declared}
	}
	f, err := pool.Read(s.SpoolDir, in, declared, max, also...)
	if err != nil {
		return nil, "", "", err
	}
	var trailers map[string]string
	if dc != nil {
		trailers = dc.trailers
		if v := headerValue(r.Header, "X-Amz-Decoded-Content-Length"); v != "" && v != strconv.FormatInt(f.Size, 10) {
			f.Close()
			return nil, "", "", incompleteBody()
		}
	}
	sum, err := integ.check(f.SHA256, a.payloadHash, trailers)
	if err != nil {
		f.Close()
		return nil, "", "", err
	}
	return f, integ.algorithm, sum, nil
}

// declaredReader yields at most left bytes of r; one more is IncompleteBody.
type declaredReader struct {
	r    io.Reader
	left int64
}

func (d *declaredReader) Read(p []byte) (int, error) {
	if int64(len(p)) > d.left+1 {
		p = p[:d.left+1]
	}
	n, err := d.r.Read(p)
	if int64(n) > d.left {
		return 0, incompleteBody()
	}
	d.left -= int64(n)
	return n, err
}

// incompleteBody refuses a decoded body whose length differs from its
// x-amz-decoded-content-length.
func incompleteBody() error {
	return s3err(http.StatusBadRequest, "IncompleteBody", "the decoded body's length differs from x-amz-decoded-content-length")
}

// awsChunked reports whether a request's body is aws-chunked (the payload
// hashes the door decodes: signed chunks, or unsigned chunks with a
// trailer), refusing the streaming forms it does not implement.
func awsChunked(a *authed) (bool, error) {
	switch a.payloadHash {
	case streamingSigned, streamingUnsignedTrailer:
		return true, nil
	case streamingSignedTrailer:
		return false, notImplemented("STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER (signed trailers)")
	}
	if strings.HasPrefix(a.payloadHash, "STREAMING-") {
		return false, notImplemented(a.payloadHash)
	}
	return false, nil
}

// declaredLength is the body's announced length after aws-chunked decoding
// (-1 unknown), which sizes its share of the pool's budget.
func declaredLength(r *http.Request, chunked bool) int64 {
	if !chunked {
		return r.ContentLength
	}
	if n, err := strconv.ParseInt(headerValue(r.Header, "X-Amz-Decoded-Content-Length"), 10, 64); err == nil && n >= 0 {
		return n
	}
	return -1
}
