package s3door_test

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// onlyReader hides a body's Seek, as a stream from a pipe would.
type onlyReader struct{ io.Reader }

// sniff records the x-amz-content-sha256 of every request the client sends.
type sniff struct {
	hc   s3.HTTPClient
	seen []string
}

func (s *sniff) Do(r *http.Request) (*http.Response, error) {
	s.seen = append(s.seen, r.Header.Get("X-Amz-Content-Sha256")+" "+r.Header.Get("X-Amz-Trailer"))
	return s.hc.Do(r)
}

func TestUnsignedPayloadTrailerFromTheSDKIsDecodedAndItsChecksumChecked(t *testing.T) {
	e := newEnvWith(t, nil, true, nil)
	sn := &sniff{hc: e.srv.Client()}
	c := e.client(e.lease("AKIDA", owner, "b/r"), func(o *s3.Options) { o.HTTPClient = sn })
	ctx := context.Background()
	body := strings.Repeat("chunky ", 20000)
	for i, in := range []*s3.PutObjectInput{
		{Bucket: aws.String("b"), Key: aws.String("r/default"), Body: strings.NewReader(body)},
		{Bucket: aws.String("b"), Key: aws.String("r/stream"), Body: onlyReader{strings.NewReader(body)}, ContentLength: aws.Int64(int64(len(body))),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c},
		{Bucket: aws.String("b"), Key: aws.String("r/sha"), Body: onlyReader{strings.NewReader(body)}, ContentLength: aws.Int64(int64(len(body))),
			ChecksumAlgorithm: types.ChecksumAlgorithmSha256},
	} {
		if _, err := c.PutObject(ctx, in); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		want := "STREAMING-UNSIGNED-PAYLOAD-TRAILER x-amz-checksum-"
		if i == 0 { // a seekable body over TLS: unsigned, its checksum in a header
			want = "UNSIGNED-PAYLOAD "
		}
		if !strings.HasPrefix(sn.seen[len(sn.seen)-1], want) {
			t.Fatalf("put %d was sent as %q, not aws-chunked with a trailer: the test proves nothing", i, sn.seen[len(sn.seen)-1])
		}
		got, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: in.Key})
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := io.ReadAll(got.Body); string(b) != body {
			t.Fatalf("put %d stored %d bytes, want the %d decoded", i, len(b), len(body))
		}
	}
	// A trailer that does not match the body: BadDigest, nothing written.
	before := e.fingerprint("b/r")
	status, out := e.rawPut(t, "AKIDA", "/b/r/bad", "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
		map[string]string{"Content-Encoding": "aws-chunked", "X-Amz-Trailer": "x-amz-checksum-crc32", "X-Amz-Decoded-Content-Length": "5"},
		"5\r\nhello\r\n0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n")
	if status != 400 || !strings.Contains(out, "<Code>BadDigest</Code>") {
		t.Fatalf("bad trailer: %d %s", status, out)
	}
	status, out = e.rawPut(t, "AKIDA", "/b/r/bad", "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
		map[string]string{"Content-Encoding": "aws-chunked", "X-Amz-Trailer": "x-amz-checksum-crc32"}, "5\r\nhel")
	if status != 400 || !strings.Contains(out, "<Code>IncompleteBody</Code>") {
		t.Fatalf("truncated body: %d %s", status, out)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused body changed state")
	}
}

// rawPut sends a PUT signed by the SDK's signer with the given payload hash
// literal and headers.
func (e *env) rawPut(t *testing.T, akid, path, payloadHash string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, seed := e.signed(t, akid, path, payloadHash, hdr, body, time.Now())
	_ = seed
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (e *env) signed(t *testing.T, akid, path, payloadHash string, hdr map[string]string, body string, at time.Time) (*http.Request, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := e.creds[akid]
	err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: akid, SecretAccessKey: c.SecretAccessKey}, req, payloadHash, "s3", "us-east-1", at)
	if err != nil {
		t.Fatal(err)
	}
	auth := req.Header.Get("Authorization")
	return req, auth[strings.LastIndex(auth, "=")+1:]
}

// TestSignedChunksAreVerified sends a STREAMING-AWS4-HMAC-SHA256-PAYLOAD
// body whose chunks are signed with the SDK's stream signer, chained on the
// header signature; a chunk changed in flight is SignatureDoesNotMatch.
func TestSignedChunksAreVerified(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.lease("AKIDA", owner, "b/r")
	at := time.Now()
	chunks := []string{strings.Repeat("a", 65536), "tail", ""}
	build := func(tamper bool) (*http.Request, int) {
		total := 0
		for _, c := range chunks {
			total += len(c)
		}
		req, seed := e.signed(t, "AKIDA", "/b/r/signed", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
			map[string]string{"Content-Encoding": "aws-chunked", "X-Amz-Decoded-Content-Length": fmt.Sprint(total)}, "", at)
		sb, _ := hex.DecodeString(seed)
		ss := v4.NewStreamSigner(aws.Credentials{AccessKeyID: "AKIDA", SecretAccessKey: cred.SecretAccessKey}, "s3", "us-east-1", sb)
		var body strings.Builder
		for i, c := range chunks {
			sig, _ := ss.GetSignature(context.Background(), nil, []byte(c), at)
			if tamper && i == 1 {
				c = "TAIL"
			}
			fmt.Fprintf(&body, "%x;chunk-signature=%x\r\n%s\r\n", len(c), sig, c)
		}
		req.Body = io.NopCloser(strings.NewReader(body.String()))
		req.ContentLength = int64(body.Len())
		return req, total
	}
	before := e.fingerprint("b/r")
	req, _ := build(true)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(b), "SignatureDoesNotMatch") {
		t.Fatalf("tampered chunk: %d %s", resp.StatusCode, b)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a tampered chunk changed state")
	}
	req, total := build(false)
	if resp, err = e.srv.Client().Do(req); err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("signed chunks: %d %s", resp.StatusCode, b)
	}
	got, err := e.client(cred).GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/signed")})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(got.Body); len(b) != total || string(b[len(b)-4:]) != "tail" {
		t.Fatalf("stored %d bytes", len(b))
	}
}

func TestChecksumsAndContentMD5AreVerified(t *testing.T) {
	e := newEnv(t, nil)
	e.lease("AKIDA", owner, "b/r")
	body := "payload"
	sha := sha256.Sum256([]byte(body))
	md := md5.Sum([]byte(body))
	good := hex.EncodeToString(sha[:])
	before := e.fingerprint("b/r")
	for name, c := range map[string]struct {
		hash string
		hdr  map[string]string
		code string
	}{
		"wrong Content-MD5":     {good, map[string]string{"Content-MD5": base64.StdEncoding.EncodeToString(make([]byte, 16))}, "BadDigest"},
		"malformed Content-MD5": {good, map[string]string{"Content-MD5": "nope"}, "InvalidDigest"},
		"wrong crc32":           {good, map[string]string{"X-Amz-Checksum-Crc32": "AAAAAA=="}, "BadDigest"},
		"wrong crc32c":          {good, map[string]string{"X-Amz-Checksum-Crc32c": "AAAAAA=="}, "BadDigest"},
		"wrong sha1":            {good, map[string]string{"X-Amz-Checksum-Sha1": base64.StdEncoding.EncodeToString(make([]byte, 20))}, "BadDigest"},
		"wrong sha256":          {good, map[string]string{"X-Amz-Checksum-Sha256": base64.StdEncoding.EncodeToString(make([]byte, 32))}, "BadDigest"},
		"wrong payload hash":    {strings.Repeat("0", 64), nil, "XAmzContentSHA256Mismatch"},
		"two algorithms":        {good, map[string]string{"X-Amz-Checksum-Crc32": "AAAAAA==", "X-Amz-Checksum-Sha1": "AAAAAA=="}, "InvalidRequest"},
	} {
		status, out := e.rawPut(t, "AKIDA", "/b/r/x", c.hash, c.hdr, body)
		if status != 400 || !strings.Contains(out, "<Code>"+c.code+"</Code>") {
			t.Errorf("%s: %d %s, want %s", name, status, out, c.code)
		}
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a body failing its check changed state")
	}
	status, out := e.rawPut(t, "AKIDA", "/b/r/x", good, map[string]string{"Content-MD5": base64.StdEncoding.EncodeToString(md[:]),
		"X-Amz-Checksum-Crc64nvme": crc64nvme(body)}, body)
	if status != 200 {
		t.Fatalf("matching Content-MD5 and CRC64NVME: %d %s", status, out)
	}
}

// crc64nvme computes CRC-64/NVME independently (bitwise, reflected
// polynomial 0x9a6c9329ac4bc9b5), checked against the catalogue's check
// value for "123456789".
func crc64nvme(s string) string {
	crc := ^uint64(0)
	for _, b := range []byte(s) {
		crc ^= uint64(b)
		for range 8 {
			if crc&1 == 1 {
				crc = crc>>1 ^ 0x9a6c9329ac4bc9b5
			} else {
				crc >>= 1
			}
		}
	}
	crc = ^crc
	var out [8]byte
	for i := range out {
		out[i] = byte(crc >> (56 - 8*i))
	}
	return base64.StdEncoding.EncodeToString(out[:])
}

func TestCRC64NVMECheckValue(t *testing.T) {
	want := base64.StdEncoding.EncodeToString([]byte{0xae, 0x8b, 0x14, 0x86, 0x0a, 0x79, 0x98, 0x88})
	if got := crc64nvme("123456789"); got != want {
		t.Fatalf("reference CRC-64/NVME: %s, want %s", got, want)
	}
}

func TestUnknownPayloadHashIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.lease("AKIDA", owner, "b/r")
	before := e.fingerprint("b/r")
	if status, out := e.rawPut(t, "AKIDA", "/b/r/x", "NOT-A-HASH", nil, "body"); status != 400 || !strings.Contains(out, "InvalidArgument") {
		t.Fatalf("unknown x-amz-content-sha256: %d %s", status, out)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("changed state")
	}
}

// TestSignedChunksCutShortAreRefused: a STREAMING-AWS4-HMAC-SHA256-PAYLOAD
// body is whole only with its signed final (empty) chunk; a body cut after a
// data chunk, or missing a chunk before the final one, writes nothing.
func TestSignedChunksCutShortAreRefused(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.lease("AKIDA", owner, "b/r")
	at := time.Now()
	chunks := []string{strings.Repeat("a", 1024), "tail", ""}
	before := e.fingerprint("b/r")
	for name, keep := range map[string]func(i int) bool{
		"without the final chunk":  func(i int) bool { return i < 2 },
		"without the middle chunk": func(i int) bool { return i != 1 },
	} {
		req, seed := e.signed(t, "AKIDA", "/b/r/cut", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
			map[string]string{"Content-Encoding": "aws-chunked"}, "", at)
		sb, _ := hex.DecodeString(seed)
		ss := v4.NewStreamSigner(aws.Credentials{AccessKeyID: "AKIDA", SecretAccessKey: cred.SecretAccessKey}, "s3", "us-east-1", sb)
		var body strings.Builder
		for i, c := range chunks {
			sig, _ := ss.GetSignature(context.Background(), nil, []byte(c), at)
			if keep(i) {
				fmt.Fprintf(&body, "%x;chunk-signature=%x\r\n%s\r\n", len(c), sig, c)
			}
		}
		req.Body = io.NopCloser(strings.NewReader(body.String()))
		req.ContentLength = int64(body.Len())
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 && resp.StatusCode != 403 {
			t.Fatalf("signed chunks %s: %d %s", name, resp.StatusCode, b)
		}
		if e.fingerprint("b/r") != before {
			t.Fatalf("signed chunks %s changed state", name)
		}
	}
}

// TestSignedChecksumHeaderIsCheckedBesideATrailer: an aws-chunked
// STREAMING-UNSIGNED-PAYLOAD-TRAILER body signs neither its chunks nor its
// trailer, so a signed x-amz-checksum-sha256 header is what binds the
// bytes to the signature. With a trailer of the same algorithm named too,
// both values are checked: a relay's other body with a trailer to match is
// refused (BadDigest) and nothing is written; the signer's own body, with
// header and trailer both its checksum, is written.
func TestSignedChecksumHeaderIsCheckedBesideATrailer(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.lease("AKIDA", owner, "b/r")
	b64 := func(s string) string { h := sha256.Sum256([]byte(s)); return base64.StdEncoding.EncodeToString(h[:]) }
	put := func(body string) (int, string) {
		return e.rawPut(t, "AKIDA", "/b/r/x", "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
			map[string]string{"Content-Encoding": "aws-chunked", "X-Amz-Trailer": "x-amz-checksum-sha256",
				"X-Amz-Checksum-Sha256": b64("hello"), "X-Amz-Decoded-Content-Length": "5"},
			"5\r\n"+body+"\r\n0\r\nx-amz-checksum-sha256:"+b64(body)+"\r\n\r\n")
	}
	if status, out := put("EVIL!"); status == 200 || !strings.Contains(out, "BadDigest") {
		t.Fatalf("another body than the signed checksum's, with a trailer to match: %d %s; want BadDigest", status, out)
	}
	if _, err := e.client(cred).HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("r/x")}); err == nil {
		t.Fatal("the refused body was written")
	}
	if status, out := put("hello"); status != 200 {
		t.Fatalf("the signed body with header and trailer both its checksum: %d %s", status, out)
	}
}
