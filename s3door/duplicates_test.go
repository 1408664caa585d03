package s3door_test

import (
	"context"
	"crypto/md5" //nolint:gosec // Content-MD5
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/s3door"
)

// signedLines is a request of akid with the header lines of hdr, each value
// a line of its own and every one signed (the SDK's signer joins a repeated
// header's lines with commas in the canonical request, as the door does);
// payloadHash "" signs the body's SHA-256.
func (e *env) signedLines(t *testing.T, akid, method, path, payloadHash string, hdr http.Header, body string) *http.Request {
	t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if payloadHash == "" {
		sum := sha256.Sum256([]byte(body))
		payloadHash = hex.EncodeToString(sum[:])
	}
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: akid, SecretAccessKey: e.creds[akid].SecretAccessKey}, req, payloadHash, "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Rule: a single-valued header the front door reads, sent on two lines, is
// read as S3 and HTTP read it, the lines joined with a comma ("1,999"),
// and refused as that malformed value is, never read as its first line:
// x-amz-meta-fence-segment (400 InvalidRequest, as an invalid segment),
// Content-MD5 (InvalidDigest), x-amz-checksum-sha256 (InvalidRequest),
// x-amz-decoded-content-length (IncompleteBody), x-amz-acl (NotImplemented
// as public-read is), and If-None-Match whose first line is empty
// (NotImplemented, as on a PUT with If-None-Match: *), x-amz-content-sha256
// and Content-Type (InvalidArgument: a singleton field). Nothing is written;
// the same PUT with one segment line is then accepted.
func TestASingleValuedHeaderSentTwiceIsRefusedAndWritesNothing(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.lease("AKIDA", owner, "b/r")
	b64 := func(sum []byte) string { return base64.StdEncoding.EncodeToString(sum) }
	md5of := func(s string) string { sum := md5.Sum([]byte(s)); return b64(sum[:]) } //nolint:gosec
	shaOf := func(s string) string { sum := sha256.Sum256([]byte(s)); return b64(sum[:]) }
	const unsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	before := e.fingerprint("b/r")
	for _, c := range []struct {
		name, payloadHash string
		hdr               http.Header
		body              string
		status            int
		code, message     string
	}{
		{"x-amz-meta-fence-segment 1 and 999", "", http.Header{s3door.SegmentHeader: {"1", "999"}}, "hello",
			400, "InvalidRequest", "x-amz-meta-fence-segment must be an integer"},
		{"x-amz-meta-fence-segment 01 (not a canonical decimal)", "", http.Header{s3door.SegmentHeader: {"01"}}, "hello",
			400, "InvalidRequest", "x-amz-meta-fence-segment must be an integer"},
		{"Content-MD5 right, then wrong", "", http.Header{"Content-Md5": {md5of("hello"), md5of("other")}}, "hello",
			400, "InvalidDigest", ""},
		{"x-amz-checksum-sha256 right, then wrong", "", http.Header{"X-Amz-Checksum-Sha256": {shaOf("hello"), shaOf("other")}}, "hello",
			400, "InvalidRequest", "x-amz-checksum-sha256"},
		{"x-amz-decoded-content-length 5 and 999", unsignedTrailer,
			http.Header{"Content-Encoding": {"aws-chunked"}, "X-Amz-Decoded-Content-Length": {"5", "999"}}, "5\r\nhello\r\n0\r\n\r\n",
			400, "IncompleteBody", ""},
		{"x-amz-acl private, then public-read", "", http.Header{"X-Amz-Acl": {"private", "public-read"}}, "hello",
			501, "NotImplemented", ""},
		{"If-None-Match empty, then *", "", http.Header{"If-None-Match": {"", "*"}}, "hello",
			501, "NotImplemented", "If-None-Match"},
		{"x-amz-content-sha256 the body's, then UNSIGNED-PAYLOAD", "", http.Header{"X-Amz-Content-Sha256": {"UNSIGNED-PAYLOAD"}}, "hello",
			400, "InvalidArgument", "x-amz-content-sha256"},
		{"Content-Type text/plain, then text/html", "", http.Header{"Content-Type": {"text/plain", "text/html"}}, "hello",
			400, "InvalidArgument", "Content-Type is given 2 times"},
	} {
		code, out := do(t, e.signedLines(t, "AKIDA", http.MethodPut, "/b/r/k", c.payloadHash, c.hdr, c.body))
		if code != c.status || !strings.Contains(out, "<Code>"+c.code+"</Code>") || !strings.Contains(out, c.message) {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, out, c.status, c.code)
		}
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a header sent twice changed state")
	}
	var h http.Header
	_, err := e.client(cred).PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/k"),
		Body: strings.NewReader("hello"), Metadata: map[string]string{"fence-segment": "1"}}, rawHeader(&h))
	if err != nil {
		t.Fatalf("the PUT with one segment line: %v", err)
	}
	if r, err := e.fences.Receipt(context.Background(), h.Get("Fence-Receipt")); err != nil || r.Segment != 1 {
		t.Fatalf("receipt of the PUT with one segment line: %+v %v", r, err)
	}
}

// Rule: an UploadPart whose query gives partNumber or uploadId twice is
// refused 400 InvalidArgument and stages nothing (the upload's parts, the
// staging budget and the spool's files are as before), and a
// CompleteMultipartUpload giving uploadId twice writes nothing; the same
// part with each given once is staged.
func TestARepeatedPartNumberOrUploadIDIsRefusedAndStagesNothing(t *testing.T) {
	var srv *s3door.Server
	e := newEnvServer(t, nil, false, nil, func(s *s3door.Server) { srv = s })
	u := begin(t, e.client(e.lease("AKIDA", owner, "b/r")), "r/k")
	u.mustPart(1, 3<<20, 'a')
	id := *u.id
	for _, q := range []string{
		"partNumber=2&partNumber=3&uploadId=" + id,
		"partNumber=2&partNumber=2&uploadId=" + id,
		"partNumber=2&uploadId=" + id + "&uploadId=" + id,
	} {
		before := partStateOf(t, e, srv, u)
		code, out := do(t, e.signedLines(t, "AKIDA", http.MethodPut, "/b/r/k?"+q, "", nil, "hello"))
		if code != 400 || !strings.Contains(out, "<Code>InvalidArgument</Code>") {
			t.Errorf("UploadPart ?%s: %d %s, want 400 InvalidArgument", q, code, out)
		}
		if after := partStateOf(t, e, srv, u); after != before {
			t.Errorf("UploadPart ?%s staged: %+v, before %+v", q, after, before)
		}
	}
	before := e.fingerprint("b/r")
	doc := "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag></Part></CompleteMultipartUpload>"
	code, out := do(t, e.signedLines(t, "AKIDA", http.MethodPost, "/b/r/k?uploadId="+id+"&uploadId="+id, "", nil, doc))
	if code != 400 || !strings.Contains(out, "<Code>InvalidArgument</Code>") {
		t.Errorf("CompleteMultipartUpload with uploadId twice: %d %s, want 400 InvalidArgument", code, out)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a Complete with uploadId twice changed state")
	}
	if code, out := do(t, e.signedLines(t, "AKIDA", http.MethodPut, "/b/r/k?partNumber=2&uploadId="+id, "", nil, "hello")); code != 200 {
		t.Fatalf("the same part with each parameter once: %d %s", code, out)
	}
	if after := partStateOf(t, e, srv, u); !strings.Contains(after.parts, "2 ") {
		t.Fatalf("part 2 not staged: %q", after.parts)
	}
}
