package s3door_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"hash/crc32"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

func crc32b64(b []byte) string {
	s := crc32.ChecksumIEEE(b)
	return base64.StdEncoding.EncodeToString([]byte{byte(s >> 24), byte(s >> 16), byte(s >> 8), byte(s)})
}

// upload stages parts of data (5 MiB each but the last) under c and returns the upload ID and parts.
func upload(t *testing.T, c *s3.Client, key string, data []byte, alg types.ChecksumAlgorithm, ctype types.ChecksumType) (*string, []types.CompletedPart) {
	t.Helper()
	ctx := context.Background()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String(key),
		ChecksumAlgorithm: alg, ChecksumType: ctype})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	var parts []types.CompletedPart
	for i := 0; i*(5<<20) < len(data); i++ {
		chunk := data[i*(5<<20) : min((i+1)*(5<<20), len(data))]
		pr, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(chunk), ChecksumAlgorithm: alg})
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: pr.ETag, ChecksumCRC32: pr.ChecksumCRC32})
	}
	return up.UploadId, parts
}

func TestMultipartIsOneFencedWrite(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), (11<<20)/16)
	id, parts := upload(t, c, "r/big", data, "", "")
	puts := e.store.puts.Load()
	if puts != 0 {
		t.Fatalf("parts reached the store: %d puts", puts)
	}
	before := e.fingerprint("b/r")
	bad := append([]types.CompletedPart(nil), parts...)
	bad[1].ETag = aws.String(`"00000000000000000000000000000000"`)
	for name, ps := range map[string][]types.CompletedPart{"wrong ETag": bad, "out of order": {parts[1], parts[0]}, "small middle part": {parts[2], parts[2]}} {
		_, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/big"),
			UploadId: id, MultipartUpload: &types.CompletedMultipartUpload{Parts: ps}})
		if code, _, _ := apiCode(t, err); code != "InvalidPart" && code != "InvalidPartOrder" && code != "EntityTooSmall" {
			t.Fatalf("%s: %s", name, code)
		}
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused completion changed state")
	}
	var h1, h2 http.Header
	in := &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/big"), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}
	if _, err := c.CompleteMultipartUpload(ctx, in, rawHeader(&h1)); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if _, err := c.CompleteMultipartUpload(ctx, in, rawHeader(&h2)); err != nil || h2.Get("Fence-Receipt") != h1.Get("Fence-Receipt") {
		t.Fatalf("retried complete: %v, receipt %q want %q", err, h2.Get("Fence-Receipt"), h1.Get("Fence-Receipt"))
	}
	// A retried Complete writes nothing and says so, as a replayed PUT does.
	if h1.Get("Fence-Replay") != "" || h2.Get("Fence-Replay") != "true" {
		t.Fatalf("Fence-Replay: first %q, retried %q; want none, then true", h1.Get("Fence-Replay"), h2.Get("Fence-Replay"))
	}
	if n := e.store.puts.Load(); n != 1 {
		t.Fatalf("the upload made %d writes, want one", n)
	}
	r, err := e.fences.Receipt(ctx, h1.Get("Fence-Receipt"))
	if err != nil || r.Segment != 1 || r.State != "COMMITTED" {
		t.Fatalf("receipt: %+v %v", r, err)
	}
	got, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/big")})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(got.Body); !bytes.Equal(b, data) {
		t.Fatalf("object: %d bytes", len(b))
	}
	if _, err := c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("b"), Key: aws.String("r/big"), UploadId: aws.String("mpu_nope")}); err == nil {
		t.Fatal("unknown upload listed")
	}
}

func TestMultipartOfASupersededLeaseIsRefusedAtCompletion(t *testing.T) {
	e := newEnv(t, nil)
	old := e.client(e.lease("AKIDOLD", owner, "b/r"))
	data := bytes.Repeat([]byte("x"), 6<<20)
	id, parts := upload(t, old, "r/big", data, "", "")
	newer := e.client(e.lease("AKIDNEW", "spiffe://test/worker-b", "b/r"))
	if err := put(newer, "r/big", "new"); err != nil {
		t.Fatal(err)
	}
	before := e.fingerprint("b/r")
	_, err := old.CompleteMultipartUpload(context.Background(), &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/big"),
		UploadId: id, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
	if code, msg, _ := apiCode(t, err); code != "AccessDenied" || !strings.HasPrefix(msg, "STALE_OWNER") {
		t.Fatalf("late completion: %s %q", code, msg)
	}
	_, err = old.UploadPart(context.Background(), &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/big"), UploadId: id,
		PartNumber: aws.Int32(3), Body: strings.NewReader("more")})
	if _, msg, _ := apiCode(t, err); !strings.HasPrefix(msg, "STALE_OWNER") {
		t.Fatalf("late part: %q", msg)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("the superseded upload changed state")
	}
}

func TestMultipartChecksumsAreVerified(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	data := bytes.Repeat([]byte("y"), 6<<20)
	id, parts := upload(t, c, "r/sum", data, types.ChecksumAlgorithmCrc32, types.ChecksumTypeFullObject)
	if aws.ToString(parts[0].ChecksumCRC32) != crc32b64(data[:5<<20]) {
		t.Fatalf("part checksum answered %q", aws.ToString(parts[0].ChecksumCRC32))
	}
	before := e.fingerprint("b/r")
	in := &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/sum"), UploadId: id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}, ChecksumCRC32: aws.String("AAAAAA=="), ChecksumType: types.ChecksumTypeFullObject}
	_, err := c.CompleteMultipartUpload(context.Background(), in)
	if code, _, _ := apiCode(t, err); code != "BadDigest" {
		t.Fatalf("wrong full-object checksum: %s", code)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused completion changed state")
	}
	in.ChecksumCRC32 = aws.String(crc32b64(data))
	if _, err := c.CompleteMultipartUpload(context.Background(), in); err != nil {
		t.Fatalf("right full-object checksum: %v", err)
	}
}

func TestConditionalGets(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	if err := put(c, "r/a", "x"); err != nil {
		t.Fatal(err)
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("r/a")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/a"), IfMatch: h.ETag}); err != nil {
		t.Fatalf("If-Match of the current ETag: %v", err)
	}
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/a"), IfMatch: aws.String(`"other"`)})
	if code, _, st := apiCode(t, err); code != "PreconditionFailed" || st != 412 {
		t.Fatalf("If-Match of another ETag: %s %d", code, st)
	}
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/a"), IfNoneMatch: h.ETag})
	var re interface{ HTTPStatusCode() int }
	if !errorsAs(err, &re) || re.HTTPStatusCode() != 304 {
		t.Fatalf("If-None-Match of the current ETag: %v", err)
	}
}

// TestPartWhoseUploadIsAbortedMeanwhileIsNoSuchUpload: a part whose body
// is still arriving when its upload is aborted is answered NoSuchUpload,
// as S3 answers a part of an aborted upload, and nothing of it is staged;
// it was a 500 (its upload's directory gone under it).
func TestPartWhoseUploadIsAbortedMeanwhileIsNoSuchUpload(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/aborted")})
	if err != nil {
		t.Fatal(err)
	}
	pp, err := s3.NewPresignClient(c).PresignUploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/aborted"),
		UploadId: up.UploadId, PartNumber: aws.Int32(1)}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	body, feed := io.Pipe()
	req, _ := http.NewRequest(http.MethodPut, pp.URL, body)
	req.ContentLength = 4
	answer := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			close(answer)
			return
		}
		answer <- resp
	}()
	if _, err := feed.Write([]byte("pa")); err != nil { // the door is reading the part
		t.Fatal(err)
	}
	if _, err := c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/aborted"),
		UploadId: up.UploadId}); err != nil {
		t.Fatalf("abort: %v", err)
	}
	_, _ = feed.Write([]byte("rt"))
	_ = feed.Close()
	resp, ok := <-answer
	if !ok {
		t.FailNow()
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(out), "NoSuchUpload") {
		t.Fatalf("part of an upload aborted while it was read: %d %s; want 404 NoSuchUpload", resp.StatusCode, out)
	}
	if _, err := c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("b"), Key: aws.String("r/aborted"), UploadId: up.UploadId}); err == nil {
		t.Fatal("the aborted upload still lists parts")
	}
	if n := e.store.puts.Load(); n != 0 {
		t.Fatalf("%d writes reached the store", n)
	}
}

// Rule: a part carrying a checksum of an upload created without a checksum
// algorithm is refused (InvalidRequest), as S3 refuses it ("Checksum Type
// mismatch occurred, expected checksum Type: null, ..."), and leaves the
// part staged before it as it was; it was verified and echoed but staged
// without its checksum, so a Complete listing the echoed checksum failed
// InvalidPart.
func TestAPartWithAChecksumOfAnUploadWithoutOneIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	first := []byte("the first part's bytes")
	id, parts := upload(t, c, "r/k", first, "", "")
	staged := e.filesUnder("s3-uploads")
	before := e.fingerprint("b/r")
	_, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String("r/k"), UploadId: id,
		PartNumber: aws.Int32(1), Body: bytes.NewReader([]byte("other bytes")), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
	if code, msg, st := apiCode(t, err); code != "InvalidRequest" || st != 400 || !strings.Contains(msg, "expected checksum Type: null") {
		t.Fatalf("a part with a checksum of an upload without one: %s %d %q", code, st, msg)
	}
	lp, err := c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("b"), Key: aws.String("r/k"), UploadId: id})
	if err != nil || len(lp.Parts) != 1 || aws.ToString(lp.Parts[0].ETag) != aws.ToString(parts[0].ETag) {
		t.Fatalf("the staged part after the refusal: %+v %v", lp, err)
	}
	if e.fingerprint("b/r") != before || e.filesUnder("s3-uploads") != staged {
		t.Fatal("a refused part changed state")
	}
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/k"),
		UploadId: id, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/k")})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(got.Body); !bytes.Equal(b, first) {
		t.Fatalf("the object is %q, want the staged part %q", b, first)
	}
}

// Rule: a completion is counted safely beside the creates that count the
// open uploads meanwhile (run with -race): every upload completes and every
// create beside them is accepted.
func TestCompletionsBesideCreatesAreCountedSafely(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	type staged struct {
		u    *mpu
		etag *string
	}
	var ups []staged
	for l := range 4 {
		c := e.client(e.lease("AKIDC"+string(rune('0'+l)), owner, "b/r"))
		for range 8 {
			u := begin(t, c, "r/k")
			ups = append(ups, staged{u, u.mustPart(1, 1, 'p').ETag})
		}
	}
	creator := e.client(e.lease("AKIDCNEW", owner, "b/r")) // before the goroutine: e.lease writes what the door reads
	done := make(chan error, 1)
	go func() {
		for _, s := range ups {
			_, err := s.u.c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String(s.u.key), UploadId: s.u.id,
				MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: s.etag}}}})
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for n := 0; ; n++ {
		var err error
		select {
		case err = <-done:
		default:
			if n < 64 {
				begin(t, creator, "r/k")
				continue
			}
			err = <-done
		}
		if err != nil {
			t.Fatalf("a completion beside creates: %v", err)
		}
		return
	}
}
