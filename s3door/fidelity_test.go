package s3door_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fencegate/fencegate"
)

// Rule: an object is its bytes with its content type and metadata (S3's
// PutObject replaces all three), so the same bytes with other metadata are
// a new write, not a replay of the first; the same bytes and metadata are.
func TestSameBytesWithOtherMetadataAreANewWrite(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	putMeta := func(ct, v string, h *http.Header) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/a"), Body: strings.NewReader("same"),
			ContentType: aws.String(ct), Metadata: map[string]string{"a": v}}, rawHeader(h))
		return err
	}
	var h1, h2, h3 http.Header
	if err := putMeta("text/plain", "1", &h1); err != nil {
		t.Fatal(err)
	}
	before, puts := e.fingerprint("b/r"), e.store.puts.Load()
	if err := putMeta("text/plain", "1", &h2); err != nil {
		t.Fatal(err)
	}
	if h2.Get("Fence-Replay") != "true" || h2.Get("Fence-Receipt") != h1.Get("Fence-Receipt") || e.fingerprint("b/r") != before || e.store.puts.Load() != puts {
		t.Fatalf("a retry with the same bytes and metadata was not a replay: %v", h2)
	}
	if err := putMeta("text/html", "2", &h3); err != nil {
		t.Fatal(err)
	}
	if h3.Get("Fence-Replay") != "" || h3.Get("Fence-Receipt") == h1.Get("Fence-Receipt") || e.store.puts.Load() != puts+1 {
		t.Fatalf("the same bytes with other metadata were answered as a replay: %v", h3)
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("r/a")})
	if err != nil || head.Metadata["a"] != "2" || aws.ToString(head.ContentType) != "text/html" {
		t.Fatalf("head after the metadata change: %+v %v", head, err)
	}
	r, err := e.fences.Receipt(ctx, h3.Get("Fence-Receipt"))
	if err != nil || r.Segment != 2 || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("receipt of the metadata change: %+v %v", r, err)
	}
}

// Rule: x-amz-meta-fence-segment sent with CreateMultipartUpload (where
// SDKs send an object's metadata) numbers the write Complete makes; a
// Complete naming another segment is refused and changes nothing.
func TestMultipartWritesTheSegmentItsCreateNamed(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	var h http.Header
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/a"), Body: strings.NewReader("x"),
		Metadata: map[string]string{"fence-segment": "1"}}); err != nil {
		t.Fatal(err)
	}
	begin := func(seg string) (*string, []types.CompletedPart) {
		up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/big"),
			Metadata: map[string]string{"fence-segment": seg}})
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/big"), UploadId: up.UploadId,
			PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("only part"))})
		if err != nil {
			t.Fatal(err)
		}
		return up.UploadId, []types.CompletedPart{{ETag: p.ETag, PartNumber: aws.Int32(1)}}
	}
	complete := func(id *string, parts []types.CompletedPart, opts ...func(*s3.Options)) error {
		_, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/big"),
			UploadId: id, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}, opts...)
		return err
	}
	before := e.fingerprint("b/r")
	id, parts := begin("5")
	if code, msg, st := apiCode(t, complete(id, parts)); code != "OperationAborted" || st != 409 || !strings.HasPrefix(msg, "SEGMENT_OUT_OF_ORDER") {
		t.Fatalf("an upload created as segment 5 after segment 1: %s %d %q", code, st, msg)
	}
	id, parts = begin("2")
	other := s3.WithAPIOptions(smithyhttp.AddHeaderValue("X-Amz-Meta-Fence-Segment", "3"))
	if code, msg, st := apiCode(t, complete(id, parts, other)); code != "InvalidRequest" || st != 400 || !strings.HasPrefix(msg, "INVALID_REQUEST") {
		t.Fatalf("a Complete naming another segment than its create: %s %d %q", code, st, msg)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused Complete changed state")
	}
	if err := complete(id, parts, rawHeader(&h)); err != nil {
		t.Fatal(err)
	}
	if r, err := e.fences.Receipt(ctx, h.Get("Fence-Receipt")); err != nil || r.Segment != 2 || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("the upload created as segment 2: %+v %v", r, err)
	}
}

// Rule: DeleteObjects' x-amz-checksum-* is its XML body's checksum (S3's
// DeleteObjects: "the checksum of the request body"); a wrong one is
// BadDigest and deletes nothing.
func TestDeleteObjectsWithAWrongBodyChecksumDeletesNothing(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	if err := put(c, "r/a", "keep me"); err != nil {
		t.Fatal(err)
	}
	before, deletes := e.fingerprint("b/r"), e.store.deletes.Load()
	st, _ := e.send(t, "AKIDA", http.MethodPost, "/b?delete=", map[string]string{"X-Amz-Checksum-Crc32": "AAAAAA=="},
		`<Delete><Object><Key>r/a</Key></Object></Delete>`)
	if st != http.StatusBadRequest {
		t.Fatalf("DeleteObjects with a wrong body checksum: %d, want 400", st)
	}
	if e.fingerprint("b/r") != before || e.store.deletes.Load() != deletes {
		t.Fatal("DeleteObjects with a wrong body checksum changed state")
	}
	// The SDK's own (right) checksum deletes.
	if _, err := c.DeleteObjects(context.Background(), &s3.DeleteObjectsInput{Bucket: aws.String("b"),
		Delete: &types.Delete{Objects: []types.ObjectIdentifier{{Key: aws.String("r/a")}}}, ChecksumAlgorithm: types.ChecksumAlgorithmCrc32}); err != nil {
		t.Fatal(err)
	}
	if e.store.deletes.Load() != deletes+1 {
		t.Fatal("DeleteObjects with its right checksum deleted nothing")
	}
}

// Rule: a lease that ended may still abort its own upload (it only
// discards what the lease staged); anything else it asks is refused.
func TestAnEndedLeaseAbortsItsOwnUpload(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.lease("AKIDA", owner, "b/r")
	c := e.client(cred)
	ctx := context.Background()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/big")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/big"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("staged")}); err != nil {
		t.Fatal(err)
	}
	staged := filepath.Join(e.spool, "s3-uploads", aws.ToString(up.UploadId))
	if _, err := os.Stat(staged); err != nil {
		t.Fatalf("the upload's staging directory: %v", err)
	}
	cred.State = fencegate.StateReleased
	e.creds["AKIDA"] = cred
	before := e.fingerprint("b/r")
	if _, err := c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("b"), Key: aws.String("r/big"), UploadId: up.UploadId}); err == nil {
		t.Fatal("an ended lease listed its parts")
	}
	if _, err := c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/big"), UploadId: up.UploadId}); err != nil {
		t.Fatalf("an ended lease's abort of its own upload: %v", err)
	}
	if _, err := os.Stat(staged); !os.IsNotExist(err) {
		t.Fatalf("the aborted upload's parts are still staged: %v", err)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("the abort changed fence state or objects")
	}
}

// Rule: a standard object header the stores cannot keep (Cache-Control,
// Content-Disposition, Content-Language, Expires, a content coding other
// than aws-chunked) is NotImplemented, never a success that drops it.
func TestObjectHeadersTheStoresCannotKeepAreNotImplemented(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	before := e.fingerprint("b/r")
	for name, in := range map[string]*s3.PutObjectInput{
		"Cache-Control":       {CacheControl: aws.String("no-cache")},
		"Content-Disposition": {ContentDisposition: aws.String("attachment")},
		"Content-Language":    {ContentLanguage: aws.String("en")},
		"Expires":             {Expires: aws.Time(time.Now().Add(time.Hour))},
		"Content-Encoding":    {ContentEncoding: aws.String("gzip")},
	} {
		in.Bucket, in.Key, in.Body = aws.String("b"), aws.String("r/a"), strings.NewReader("x")
		_, err := c.PutObject(ctx, in)
		if code, _, st := apiCode(t, err); code != "NotImplemented" || st != 501 {
			t.Errorf("PutObject with %s: %s %d, want NotImplemented 501", name, code, st)
		}
	}
	_, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/a"), CacheControl: aws.String("no-cache")})
	if code, _, st := apiCode(t, err); code != "NotImplemented" || st != 501 {
		t.Errorf("CreateMultipartUpload with Cache-Control: %s %d", code, st)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused header changed state")
	}
}

// Rule: a presigned URL carries no seed signature for an aws-chunked
// body's chunk chain, so a presigned STREAMING-* upload is refused and
// writes nothing.
func TestPresignedStreamingUploadIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.lease("AKIDA", owner, "b/r")
	before := e.fingerprint("b/r")
	const hash = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	u := e.srv.URL + "/b/r/a?X-Amz-Expires=300&X-Amz-Content-Sha256=" + url.QueryEscape(hash)
	req, _ := http.NewRequest(http.MethodPut, u, nil)
	signed, _, err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).PresignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: "AKIDA", SecretAccessKey: e.creds["AKIDA"].SecretAccessKey}, req, hash, "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	body := "5;chunk-signature=" + strings.Repeat("0", 64) + "\r\nhello\r\n0;chunk-signature=" + strings.Repeat("0", 64) + "\r\n\r\n"
	put, _ := http.NewRequest(http.MethodPut, signed, strings.NewReader(body))
	resp, err := e.srv.Client().Do(put)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("presigned streaming upload: %d %s, want 501", resp.StatusCode, msg)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a presigned streaming upload changed state")
	}
}

// Rule: a part sent without a checksum, of an upload created with one, gets
// the upload's algorithm computed over it (S3 computes it server-side), so
// the upload's COMPOSITE checksum covers every part: a Complete checksum
// over only the parts that sent theirs is BadDigest.
func TestACompositeChecksumCoversAPartSentWithoutOne(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	bare := e.client(e.creds["AKIDA"], func(o *s3.Options) { o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired })
	ctx := context.Background()
	one, two := bytes.Repeat([]byte("p"), 5<<20), []byte("the last part")
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/comp"),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32, ChecksumType: types.ChecksumTypeComposite})
	if err != nil {
		t.Fatal(err)
	}
	p1, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/comp"), UploadId: up.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader(one), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Header
	p2, err := bare.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/comp"), UploadId: up.UploadId,
		PartNumber: aws.Int32(2), Body: bytes.NewReader(two)}, rawHeader(&h))
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Get("X-Amz-Checksum-Crc32"); got != crc32b64(two) {
		t.Fatalf("the part sent without a checksum was answered with %q, want its CRC32 %q", got, crc32b64(two))
	}
	raw := func(s string) []byte { b, _ := base64.StdEncoding.DecodeString(s); return b }
	composite := func(sums ...string) string {
		var all []byte
		for _, s := range sums {
			all = append(all, raw(s)...)
		}
		return crc32b64(all) + "-2"
	}
	parts := []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: p1.ETag}, {PartNumber: aws.Int32(2), ETag: p2.ETag}}
	in := &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/comp"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}, ChecksumCRC32: aws.String(composite(crc32b64(one))),
		ChecksumType: types.ChecksumTypeComposite}
	before := e.fingerprint("b/r")
	_, err = c.CompleteMultipartUpload(ctx, in)
	if code, _, _ := apiCode(t, err); code != "BadDigest" {
		t.Fatalf("a composite over the first part only: %s, want BadDigest", code)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused completion changed state")
	}
	in.ChecksumCRC32 = aws.String(composite(crc32b64(one), crc32b64(two)))
	if _, err := c.CompleteMultipartUpload(ctx, in); err != nil {
		t.Fatalf("the composite over both parts: %v", err)
	}
}

// Rule: a DeleteObject carrying Cache-Control (a caching directive, not an
// object header there) deletes, as S3 does.
func TestDeleteObjectWithCacheControlDeletes(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	if err := put(c, "r/a", "x"); err != nil {
		t.Fatal(err)
	}
	deletes := e.store.deletes.Load()
	_, err := c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String("b"), Key: aws.String("r/a")},
		s3.WithAPIOptions(smithyhttp.AddHeaderValue("Cache-Control", "no-cache")))
	if err != nil || e.store.deletes.Load() != deletes+1 {
		t.Fatalf("DeleteObject with Cache-Control: %v, %d deletes", err, e.store.deletes.Load()-deletes)
	}
}

// Rule: x-amz-* headers a presigner moved into a presigned URL's query
// (metadata, a checksum, a trailer) are refused NotImplemented, never a
// write that drops them; the same write with them as signed headers goes.
func TestPresignedHeadersHoistedIntoTheQueryAreRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.lease("AKIDA", owner, "b/r")
	signer := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
	creds := aws.Credentials{AccessKeyID: "AKIDA", SecretAccessKey: e.creds["AKIDA"].SecretAccessKey}
	before := e.fingerprint("b/r")
	for name, hdr := range map[string][2]string{
		"metadata": {"X-Amz-Meta-Owner", "alice"},
		"checksum": {"X-Amz-Checksum-Crc32", "AAAAAA=="},
		"segment":  {"X-Amz-Meta-Fence-Segment", "7"},
	} {
		// In the query, as a presigner may put x-amz-* headers (aws-sdk-go-v2
		// keeps metadata and checksum values as headers, hand-made and other
		// presigners need not), signed with it.
		req, _ := http.NewRequest(http.MethodPut, e.srv.URL+"/b/r/hoisted?X-Amz-Expires=300&"+hdr[0]+"="+url.QueryEscape(hdr[1]), nil)
		signed, h, err := signer.PresignHTTP(context.Background(), creds, req, "UNSIGNED-PAYLOAD", "s3", "us-east-1", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		put, _ := http.NewRequest(http.MethodPut, signed, strings.NewReader("hello"))
		for k, v := range h {
			put.Header[k] = v
		}
		resp, err := e.srv.Client().Do(put)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotImplemented {
			t.Errorf("%s hoisted into the query: %d, want 501", name, resp.StatusCode)
		}
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused presigned write changed state")
	}
}

// Rule: aws-sdk-go-v2's presigned GET with ChecksumMode and presigned PUT
// with a ChecksumAlgorithm (which it moves into the query as
// X-Amz-Checksum-Mode and X-Amz-Sdk-Checksum-Algorithm) are served.
func TestSDKPresignedChecksumOptionsAreServed(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.lease("AKIDA", owner, "b/r")
	pc := s3.NewPresignClient(e.client(cred))
	ctx := context.Background()
	body := []byte("hello")
	pr, err := pc.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/p"),
		ChecksumAlgorithm: types.ChecksumAlgorithmCrc32, ChecksumCRC32: aws.String(crc32b64(body))})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pr.URL, "X-Amz-Sdk-Checksum-Algorithm=") {
		t.Logf("the SDK kept the checksum algorithm out of the query: %s", pr.URL)
	}
	put, _ := http.NewRequest(http.MethodPut, pr.URL, bytes.NewReader(body))
	for k, v := range pr.SignedHeader {
		put.Header[k] = v
	}
	resp, err := e.srv.Client().Do(put)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("SDK-presigned PUT with a checksum algorithm: %d, want 200", resp.StatusCode)
	}
	gr, err := pc.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/p"), ChecksumMode: types.ChecksumModeEnabled})
	if err != nil {
		t.Fatal(err)
	}
	get, _ := http.NewRequest(http.MethodGet, gr.URL, nil)
	for k, v := range gr.SignedHeader {
		get.Header[k] = v
	}
	resp, err = e.srv.Client().Do(get)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(got) != "hello" {
		t.Fatalf("SDK-presigned GET with ChecksumMode: %d %q", resp.StatusCode, got)
	}
}
