package s3door

import (
	"crypto/md5" //nolint:gosec // Content-MD5 is S3's integrity check, not a security one
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"net/http"
	"strings"
)

// Integrity checks of an uploaded body
// (https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html):
// Content-MD5 (BadDigest on mismatch, InvalidDigest if malformed), one
// x-amz-checksum-<algorithm> header or aws-chunked trailer (BadDigest),
// and a hex x-amz-content-sha256 (XAmzContentSHA256Mismatch). The body's
// SHA-256 is always computed by the spool; the others only when asked for.

// crc64NVME is the CRC-64/NVME polynomial (reversed form), which Go's
// crc64 package runs with the all-ones initial value and final XOR the
// algorithm specifies.
var crc64NVME = crc64.MakeTable(0x9a6c9329ac4bc9b5)

// checksumAlgorithms are the x-amz-checksum-* algorithms the front door verifies.
var checksumAlgorithms = map[string]func() hash.Hash{
	"crc32":     func() hash.Hash { return crc32.NewIEEE() },
	"crc32c":    func() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) },
	"crc64nvme": func() hash.Hash { return crc64.New(crc64NVME) },
	"sha1":      sha1.New,
	"sha256":    nil, // the spool's own SHA-256
}

// checksumSize is the length in bytes of an algorithm's checksum.
func checksumSize(alg string) int {
	if mk := checksumAlgorithms[alg]; mk != nil {
		return mk().Size()
	}
	return sha256.Size
}

// integrity collects what a body must match and the hashes it needs.
type integrity struct {
	md5       []byte // Content-MD5, decoded
	md5h      hash.Hash
	algorithm string // "crc32", ...; "" for none
	want      string // the header's base64 value; "" when none was sent
	h         hash.Hash
	trailer   string // the trailer carrying the checksum (x-amz-trailer)
}

// readIntegrity reads the checks a request asks for; a malformed or
// unsupported one is refused before the body is read.
func readIntegrity(hd http.Header, chunked bool) (*integrity, error) {
	in := &integrity{}
	if v := headerValue(hd, "Content-MD5"); v != "" {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil || len(b) != md5.Size {
			return nil, s3err(http.StatusBadRequest, "InvalidDigest", "The Content-MD5 you specified was invalid.")
		}
		in.md5, in.md5h = b, md5.New()
	}
	for k, vs := range hd {
		alg, ok := strings.CutPrefix(strings.ToLower(k), "x-amz-checksum-")
		if !ok || alg == "mode" || alg == "type" || alg == "algorithm" {
			continue
		}
		if err := in.set(alg); err != nil {
			return nil, err
		}
		// An empty or malformed value is refused, as S3 refuses it, not
		// taken for "no checksum" (which would echo the algorithm as
		// verified) nor compared only after the body is read.
		v := joinValues(vs) // two lines: "a,b", invalid
		if b, err := base64.StdEncoding.DecodeString(v); err != nil || len(b) != checksumSize(alg) {
			return nil, s3err(http.StatusBadRequest, "InvalidRequest", "Value for "+strings.ToLower(k)+" header is invalid.")
		}
		in.want = v
	}
	if t := headerValue(hd, "X-Amz-Trailer"); t != "" {
		alg, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(t)), "x-amz-checksum-")
		if !ok || !chunked {
			return nil, s3err(http.StatusBadRequest, "InvalidRequest", "x-amz-trailer must name an x-amz-checksum-* trailer of an aws-chunked body")
		}
		if err := in.set(alg); err != nil {
			return nil, err
		}
		in.trailer = "x-amz-checksum-" + alg
	}
	return in, nil
}

func (in *integrity) set(alg string) error {
	mk, ok := checksumAlgorithms[alg]
	if !ok {
		return s3err(http.StatusBadRequest, "InvalidRequest", "unsupported checksum algorithm "+alg)
	}
	if in.algorithm != "" && in.algorithm != alg {
		return s3err(http.StatusBadRequest, "InvalidRequest", "Expecting a single x-amz-checksum- header")
	}
	in.algorithm = alg
	if mk != nil && in.h == nil {
		in.h = mk()
	}
	return nil
}

// writers are the hashes the spool must feed.
func (in *integrity) writers() []io.Writer {
	var w []io.Writer
	if in.md5h != nil {
		w = append(w, in.md5h)
	}
	if in.h != nil {
		w = append(w, in.h)
	}
	return w
}

// check compares the body's sums with what the client declared.
// payloadHash is the signed x-amz-content-sha256 (checked when it is a hex
// digest), trailers those of an aws-chunked body.
func (in *integrity) check(sha256sum []byte, payloadHash string, trailers map[string]string) (checksum string, err error) {
	if len(payloadHash) == 64 {
		if want, err := hex.DecodeString(payloadHash); err != nil || subtle.ConstantTimeCompare(want, sha256sum) != 1 {
			return "", s3err(http.StatusBadRequest, "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed.")
		}
	}
	if in.md5h != nil && subtle.ConstantTimeCompare(in.md5h.Sum(nil), in.md5) != 1 {
		return "", s3err(http.StatusBadRequest, "BadDigest", "The Content-MD5 you specified did not match what we received.")
	}
	if in.algorithm == "" {
		return "", nil
	}
	// Every value declared is checked: the header's (signed with the
	// request) and the trailer's (signed only with a signed trailer) when a
	// request sends both, so an unsigned trailer cannot stand in for the
	// signed header a relay would have to forge the body past.
	wants := []string{}
	if in.want != "" {
		wants = append(wants, in.want)
	}
	if in.trailer != "" {
		tv := trailers[in.trailer]
		if tv == "" {
			return "", s3err(http.StatusBadRequest, "InvalidRequest", "the aws-chunked body lacks its "+in.trailer+" trailer")
		}
		wants = append(wants, tv)
	}
	sum := sha256sum
	if in.h != nil {
		sum = in.h.Sum(nil)
	}
	got := base64.StdEncoding.EncodeToString(sum)
	for _, want := range wants {
		if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			return "", s3err(http.StatusBadRequest, "BadDigest", "The "+strings.ToUpper(in.algorithm)+" you specified did not match the calculated checksum.")
		}
	}
	return got, nil
}
