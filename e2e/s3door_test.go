package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// The S3 front door through the built binary, with aws-sdk-go-v2's own S3
// client signing with the lease's credentials, on the local-directory store
// and on versitygw.

// doorLease is a lease acquired with its S3 credentials.
type doorLease struct {
	lease
	akid, secret string
}

func (p *gatewayProc) acquireS3(t *testing.T, token, resource, requestID string) doorLease {
	t.Helper()
	body := fmt.Sprintf(`{"resource":%q,"requestId":%q,"ttlMs":60000,"operationId":"op-door","s3Credentials":true}`, resource, requestID)
	a := p.do(t, "POST", "/v1/leases", token, map[string]string{"Content-Type": "application/json"}, body)
	if a.status != http.StatusCreated {
		t.Fatalf("acquire %s: %d %s", resource, a.status, a.body)
	}
	c, _ := a.json["s3Credentials"].(map[string]any)
	l := doorLease{lease: lease{id: a.str("lease"), grant: a.str("grant"), status: a.str("statusProof"), fence: a.num("fenceToken")}}
	l.akid, _ = c["accessKeyId"].(string)
	l.secret, _ = c["secretAccessKey"].(string)
	if l.akid == "" || l.secret == "" {
		t.Fatalf("acquire answered no S3 credentials: %s", a.body)
	}
	return l
}

// headers records the HTTP answer's headers of the calls made with it.
type headers struct{ last http.Header }

func (h *headers) Do(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		h.last = resp.Header.Clone()
	}
	return resp, err
}

func (p *gatewayProc) s3Client(l doorLease, h *headers) *s3.Client {
	var hc s3.HTTPClient = http.DefaultClient
	if h != nil {
		hc = h
	}
	return s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(p.base), UsePathStyle: true, HTTPClient: hc,
		Credentials: credentials.NewStaticCredentialsProvider(l.akid, l.secret, "")})
}

func s3Code(t *testing.T, err error) (string, string) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("want an S3 error, got %v", err)
	}
	return ae.ErrorCode(), ae.ErrorMessage()
}

// doorState is what a refused request must not change: the listing of the
// bucket (keys, ETags, sizes) and the operation's receipts.
func (p *gatewayProc) doorState(t *testing.T, c *s3.Client, bucket string) string {
	t.Helper()
	out, err := c.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	var b strings.Builder
	for _, o := range out.Contents {
		fmt.Fprintf(&b, "%s %s %d\n", aws.ToString(o.Key), aws.ToString(o.ETag), aws.ToInt64(o.Size))
	}
	r := p.do(t, "GET", "/v1/receipts?operationId=op-door&limit=500", "token-a", nil, "")
	return b.String() + string(r.body)
}

func TestS3FrontDoorWithTheSDK(t *testing.T) { onEachDoorStore(t, frontDoorFlow) }

// onEachDoorStore runs flow against a `gateway dev` whose store "docs" is a
// local directory, then versitygw (workers worker-a and worker-b, status
// proofs by query).
func onEachDoorStore(t *testing.T, flow func(*testing.T, *gatewayProc)) {
	for _, backend := range []string{"local", "versitygw"} {
		t.Run(backend, func(t *testing.T) {
			store := "local:" + t.TempDir()
			var env []string
			if backend == "versitygw" {
				b := newS3Bucket(t)
				store, env = b.storeURL(""), b.env()
			}
			p := startGatewayEnv(t, env, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a",
				"--identity", "worker-b=token-b", "--store", "docs="+store, "--status-mode", "query")
			flow(t, p)
		})
	}
}

func frontDoorFlow(t *testing.T, p *gatewayProc) {
	ctx := context.Background()
	la := p.acquireS3(t, "token-a", "docs/out", "door-a")
	var h headers
	a := p.s3Client(la, &h)
	bkt := aws.String("docs")

	// put / get / head / list / delete, with the SDK's default checksum.
	if _, err := a.PutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: aws.String("out/a.txt"), Body: strings.NewReader("alpha")}); err != nil {
		t.Fatalf("put: %v", err)
	}
	first := h.last.Get("Fence-Receipt")
	rc := p.do(t, "GET", "/v1/receipts/"+first, "token-a", nil, "")
	if rc.status != 200 || rc.str("state") != "COMMITTED" || rc.num("segment") != 1 {
		t.Fatalf("receipt %s: %d %s", first, rc.status, rc.body)
	}
	for alg, body := range map[types.ChecksumAlgorithm]string{types.ChecksumAlgorithmSha256: "s", types.ChecksumAlgorithmCrc32c: "c",
		types.ChecksumAlgorithmSha1: "1", types.ChecksumAlgorithmCrc32: "3"} {
		if _, err := a.PutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: aws.String("out/sum-" + string(alg)),
			Body: strings.NewReader(body), ChecksumAlgorithm: alg}); err != nil {
			t.Fatalf("put with %s: %v", alg, err)
		}
	}
	got, err := a.GetObject(ctx, &s3.GetObjectInput{Bucket: bkt, Key: aws.String("out/a.txt")})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if b, _ := io.ReadAll(got.Body); string(b) != "alpha" {
		t.Fatalf("get: %q", b)
	}
	if hd, err := a.HeadObject(ctx, &s3.HeadObjectInput{Bucket: bkt, Key: aws.String("out/a.txt")}); err != nil || aws.ToInt64(hd.ContentLength) != 5 {
		t.Fatalf("head: %v", err)
	}
	if _, err := a.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: bkt, Key: aws.String("out/sum-SHA1")}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	list, err := a.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: bkt, Prefix: aws.String("out/")})
	if err != nil || len(list.Contents) != 4 {
		t.Fatalf("list: %d %v", len(list.Contents), err)
	}

	// A retry of the same bytes answers the original receipt and writes nothing.
	if _, err := a.PutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: aws.String("out/a.txt"), Body: strings.NewReader("alpha")}); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if h.last.Get("Fence-Receipt") != first || h.last.Get("Fence-Replay") != "true" {
		t.Fatalf("retry answered %q (replay %q), want the original %q", h.last.Get("Fence-Receipt"), h.last.Get("Fence-Replay"), first)
	}

	// Multipart: 3 parts of 8 MiB and a last one, admitted as one write.
	data := make([]byte, 3*8<<20+1<<20)
	_, _ = rand.Read(data)
	up, err := a.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: bkt, Key: aws.String("out/big.bin")})
	if err != nil {
		t.Fatalf("create upload: %v", err)
	}
	var parts []types.CompletedPart
	for i := 0; i*8<<20 < len(data); i++ {
		chunk := data[i*8<<20 : min((i+1)*8<<20, len(data))]
		pr, err := a.UploadPart(ctx, &s3.UploadPartInput{Bucket: bkt, Key: aws.String("out/big.bin"), UploadId: up.UploadId,
			PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(chunk)})
		if err != nil {
			t.Fatalf("part %d: %v", i+1, err)
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(int32(i + 1)), ETag: pr.ETag})
	}
	lp, err := a.ListParts(ctx, &s3.ListPartsInput{Bucket: bkt, Key: aws.String("out/big.bin"), UploadId: up.UploadId})
	if err != nil || len(lp.Parts) != 4 {
		t.Fatalf("list parts: %v", err)
	}
	complete := func(parts []types.CompletedPart) error {
		_, err := a.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: bkt, Key: aws.String("out/big.bin"),
			UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}})
		return err
	}
	if err := complete(parts); err != nil {
		t.Fatalf("complete: %v", err)
	}
	completed := h.last.Get("Fence-Receipt")
	done := p.doorState(t, a, "docs")
	// Sent again, the same list is the replay; another list is refused
	// NoSuchUpload, never answered with the first one's result.
	if err := complete(parts); err != nil || h.last.Get("Fence-Replay") != "true" || h.last.Get("Fence-Receipt") != completed {
		t.Fatalf("the same Complete again: %v, replay %q, receipt %q want %q", err, h.last.Get("Fence-Replay"), h.last.Get("Fence-Receipt"), completed)
	}
	if code, _ := s3Code(t, complete(parts[len(parts)-1:])); code != "NoSuchUpload" {
		t.Fatalf("a Complete naming other parts after the completion: %s, want NoSuchUpload", code)
	}
	if p.doorState(t, a, "docs") != done {
		t.Fatal("a Complete after the completion changed state")
	}
	big, err := a.GetObject(ctx, &s3.GetObjectInput{Bucket: bkt, Key: aws.String("out/big.bin")})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(big.Body); !bytes.Equal(b, data) {
		t.Fatalf("multipart object: %d bytes, want %d equal", len(b), len(data))
	}
	abort, _ := a.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: bkt, Key: aws.String("out/aborted")})
	if _, err := a.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: bkt, Key: aws.String("out/aborted"), UploadId: abort.UploadId}); err != nil {
		t.Fatalf("abort: %v", err)
	}

	// Presigned GET and PUT.
	pc := s3.NewPresignClient(a)
	pg, err := pc.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: bkt, Key: aws.String("out/a.txt")}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "alpha" {
		t.Fatalf("presigned GET: %d %q", resp.StatusCode, b)
	}
	pp, err := pc.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: aws.String("out/presigned.txt")})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, pp.URL, strings.NewReader("via-url"))
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("presigned PUT: %v %v", resp, err)
	}
	resp.Body.Close()

	before := p.doorState(t, a, "docs")
	// A wrong secret, an unsupported operation: refused, nothing changes.
	bad := la
	bad.secret = "wrong"
	_, err = p.s3Client(bad, nil).PutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: aws.String("out/a.txt"), Body: strings.NewReader("x")})
	if code, _ := s3Code(t, err); code != "SignatureDoesNotMatch" {
		t.Fatalf("bad signature: %s", code)
	}
	_, err = a.CopyObject(ctx, &s3.CopyObjectInput{Bucket: bkt, Key: aws.String("out/copy"), CopySource: aws.String("docs/out/a.txt")})
	if code, _ := s3Code(t, err); code != "NotImplemented" {
		t.Fatalf("copy: %s", code)
	}
	if p.doorState(t, a, "docs") != before {
		t.Fatal("a refused request changed state")
	}

	// The lease ends, a new owner writes; the old owner's late write is refused.
	if r := p.do(t, "DELETE", "/v1/leases/"+la.id, "token-a", nil, ""); r.status >= 300 {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	lb := p.acquireS3(t, "token-b", "docs/out", "door-b")
	bc := p.s3Client(lb, nil)
	if _, err := bc.PutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: aws.String("out/a.txt"), Body: strings.NewReader("bravo")}); err != nil {
		t.Fatalf("new owner's write: %v", err)
	}
	before = p.doorState(t, bc, "docs")
	_, err = a.PutObject(ctx, &s3.PutObjectInput{Bucket: bkt, Key: aws.String("out/a.txt"), Body: strings.NewReader("late")})
	if code, msg := s3Code(t, err); code != "AccessDenied" || !strings.HasPrefix(msg, "STALE_OWNER") {
		t.Fatalf("late write of the old owner: %s %q", code, msg)
	}
	if _, err = a.GetObject(ctx, &s3.GetObjectInput{Bucket: bkt, Key: aws.String("out/a.txt")}); err == nil {
		t.Fatal("the ended lease's credential still reads")
	}
	if p.doorState(t, bc, "docs") != before {
		t.Fatal("the stale write changed state")
	}
	got, err = bc.GetObject(ctx, &s3.GetObjectInput{Bucket: bkt, Key: aws.String("out/a.txt")})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(got.Body); string(b) != "bravo" {
		t.Fatalf("object holds %q, want the new owner's", b)
	}
}
