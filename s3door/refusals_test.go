package s3door_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate"
)

// fingerprint is every piece of state a write could change: the resources'
// fence state, all receipts, quarantine, and the objects in the store.
func (e *env) fingerprint(resources ...string) string {
	ctx := context.Background()
	h := sha256.New()
	for _, r := range resources {
		rs, err := e.fences.Resource(ctx, r)
		fmt.Fprintf(h, "%s %+v %v\n", r, rs, err)
	}
	for _, s := range []fencegate.ReceiptState{fencegate.ReceiptPending, fencegate.ReceiptCommitted, fencegate.ReceiptFailed,
		fencegate.ReceiptUnknown, fencegate.ReceiptNotApplied} {
		p, err := e.fences.ReceiptsByState(ctx, s, fencegate.Page{Limit: 1000})
		b, _ := json.Marshal(p)
		fmt.Fprintf(h, "%s %s %v\n", s, b, err)
	}
	q, _ := e.fences.Quarantined(ctx, "", fencegate.Page{Limit: 1000})
	b, _ := json.Marshal(q)
	h.Write(b)
	objs, _, _ := e.store.List(ctx, "", "", 10000)
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
	for _, o := range objs {
		fmt.Fprintf(h, "%s %s %d\n", o.Key, o.ETag, o.Size)
	}
	fmt.Fprintf(h, "puts %d deletes %d", e.store.puts.Load(), e.store.deletes.Load())
	return fmt.Sprintf("%x", h.Sum(nil))
}

func put(c *s3.Client, key, body string, opts ...func(*s3.Options)) error {
	_, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String(key),
		Body: strings.NewReader(body)}, opts...)
	return err
}

func TestBadSignatureIsSignatureDoesNotMatchAndChangesNothing(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.lease("AKIDA", owner, "b/k")
	before := e.fingerprint("b/k")
	wrong := cred
	wrong.SecretAccessKey = "not-the-secret"
	err := put(e.client(wrong), "k", "x")
	if code, _, st := apiCode(t, err); code != "SignatureDoesNotMatch" || st != 403 {
		t.Fatalf("wrong secret: %s %d", code, st)
	}
	unknown := cred
	unknown.AccessKeyID = "AKIDNOPE"
	if code, _, _ := apiCode(t, put(e.client(unknown), "k", "x")); code != "InvalidAccessKeyId" {
		t.Fatalf("unknown key: %s", code)
	}
	_, err = e.client(wrong).GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("k")})
	if code, _, _ := apiCode(t, err); code != "SignatureDoesNotMatch" {
		t.Fatalf("read with a wrong secret: %s", code)
	}
	resp, err := http.Post(e.srv.URL+"/b/k", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || !strings.Contains(string(b), "<Code>AccessDenied</Code>") || !strings.Contains(string(b), "<RequestId>") {
		t.Fatalf("anonymous: %d %s", resp.StatusCode, b)
	}
	if e.fingerprint("b/k") != before {
		t.Fatal("a refused request changed state")
	}
}

// TestTamperedRequestIsRefused signs a request with the SDK's signer and
// changes a signed part of it afterwards.
func TestTamperedRequestIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.lease("AKIDA", owner, "b/k")
	before := e.fingerprint("b/k")
	for _, tamper := range []func(*http.Request){
		func(r *http.Request) { r.URL.Path = "/b/other" },
		func(r *http.Request) { r.Header.Set("X-Amz-Meta-Fence-Segment", "7") },
		func(r *http.Request) { // a minute later, on the same day (another day is AuthorizationHeaderMalformed)
			at, _ := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
			later := at.Add(time.Minute)
			if later.Day() != at.Day() {
				later = at.Add(-time.Minute)
			}
			r.Header.Set("X-Amz-Date", later.Format("20060102T150405Z"))
		},
	} {
		body := "x"
		sum := sha256.Sum256([]byte(body))
		req, _ := http.NewRequest(http.MethodPut, e.srv.URL+"/b/k", strings.NewReader(body))
		req.Header.Set("X-Amz-Content-Sha256", fmt.Sprintf("%x", sum))
		req.Header.Set("X-Amz-Meta-Fence-Segment", "1")
		err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
			aws.Credentials{AccessKeyID: cred.AccessKeyID, SecretAccessKey: cred.SecretAccessKey}, req, fmt.Sprintf("%x", sum), "s3", "us-east-1", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		tamper(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || !strings.Contains(string(b), "SignatureDoesNotMatch") {
			t.Fatalf("tampered request: %d %s", resp.StatusCode, b)
		}
	}
	if e.fingerprint("b/k") != before {
		t.Fatal("a tampered request changed state")
	}
}

func TestStaleOwnerIsRefusedWithTheFencegateCode(t *testing.T) {
	e := newEnv(t, nil)
	old := e.client(e.lease("AKIDOLD", owner, "b/r"))
	if err := put(old, "r/x", "old-1"); err != nil {
		t.Fatalf("old owner's first write: %v", err)
	}
	newer := e.client(e.lease("AKIDNEW", "spiffe://test/worker-b", "b/r"))
	if err := put(newer, "r/x", "new"); err != nil {
		t.Fatalf("new owner's write: %v", err)
	}
	before := e.fingerprint("b/r")
	code, msg, st := apiCode(t, put(old, "r/x", "old-late"))
	if code != "AccessDenied" || st != 403 || !strings.HasPrefix(msg, "STALE_OWNER") {
		t.Fatalf("late write of the superseded owner: %s %d %q", code, st, msg)
	}
	var dh http.Header
	_, err := old.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String("b"), Key: aws.String("r/x")}, rawHeader(&dh))
	if _, msg, _ := apiCode(t, err); !strings.HasPrefix(msg, "STALE_OWNER") {
		t.Fatalf("late delete: %q", msg)
	}
	_, err = old.CreateMultipartUpload(context.Background(), &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/x")})
	if _, msg, _ := apiCode(t, err); !strings.HasPrefix(msg, "STALE_OWNER") {
		t.Fatalf("late multipart: %q", msg)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("the stale owner's requests changed state")
	}
	got, err := newer.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/x")})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(got.Body); string(b) != "new" {
		t.Fatalf("object holds %q, want the new owner's bytes", b)
	}
}

func TestRetryWithTheSameBytesReturnsTheOriginalReceipt(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	var h1, h2, h3 http.Header
	if err := put(c, "r/a", "same", rawHeader(&h1)); err != nil {
		t.Fatal(err)
	}
	if err := put(c, "r/other", "x"); err != nil {
		t.Fatal(err)
	}
	puts := e.store.puts.Load()
	before := e.fingerprint("b/r")
	if err := put(c, "r/a", "same", rawHeader(&h2)); err != nil {
		t.Fatal(err)
	}
	if h2.Get("Fence-Receipt") != h1.Get("Fence-Receipt") || h2.Get("Fence-Replay") != "true" || h2.Get("ETag") != h1.Get("ETag") {
		t.Fatalf("retry answered receipt %q (replay %q), want %q", h2.Get("Fence-Receipt"), h2.Get("Fence-Replay"), h1.Get("Fence-Receipt"))
	}
	if e.store.puts.Load() != puts || e.fingerprint("b/r") != before {
		t.Fatal("the retry wrote")
	}
	// Other bytes for the key are a new write, and after it the first bytes are too.
	if err := put(c, "r/a", "changed"); err != nil {
		t.Fatal(err)
	}
	if err := put(c, "r/a", "same", rawHeader(&h3)); err != nil {
		t.Fatal(err)
	}
	if h3.Get("Fence-Receipt") == h1.Get("Fence-Receipt") || h3.Get("Fence-Replay") != "" {
		t.Fatal("bytes written again after a change were taken for a retry")
	}
	// Receipts are queryable by operation ID.
	p, err := e.fences.ReceiptsByOperation(context.Background(), "op-s3", fencegate.Page{Limit: 100})
	if err != nil || len(p.Receipts) != 4 {
		t.Fatalf("receipts by operation: %d %v", len(p.Receipts), err)
	}
}

func TestClientSuppliedSegmentIsHonoured(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	var h http.Header
	_, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/a"),
		Body: strings.NewReader("x"), Metadata: map[string]string{"fence-segment": "1"}}, rawHeader(&h))
	if err != nil {
		t.Fatal(err)
	}
	before := e.fingerprint("b/r")
	_, err = c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/b"),
		Body: strings.NewReader("y"), Metadata: map[string]string{"fence-segment": "5"}})
	if code, msg, st := apiCode(t, err); code != "OperationAborted" || st != 409 || !strings.HasPrefix(msg, "SEGMENT_OUT_OF_ORDER") {
		t.Fatalf("skipped segment: %s %d %q", code, st, msg)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused segment changed state")
	}
}

func TestUnsupportedOperationsAreNotImplemented(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	before := e.fingerprint("b/r")
	for name, call := range map[string]func() error{
		"CopyObject": func() error {
			_, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("b"), Key: aws.String("r/c"), CopySource: aws.String("b/r/a")})
			return err
		},
		"PutObjectTagging": func() error {
			_, err := c.PutObjectTagging(ctx, &s3.PutObjectTaggingInput{Bucket: aws.String("b"), Key: aws.String("r/a"),
				Tagging: &typesTagging})
			return err
		},
		"GetBucketVersioning": func() error {
			_, err := c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String("b")})
			return err
		},
		"PutObject with SSE": func() error {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/a"), Body: strings.NewReader("x"),
				ServerSideEncryption: "AES256"})
			return err
		},
		"DeleteBucket": func() error {
			_, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String("b")})
			return err
		},
	} {
		if code, _, st := apiCode(t, call()); code != "NotImplemented" || st != 501 {
			t.Errorf("%s: %s %d, want NotImplemented 501", name, code, st)
		}
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("an unsupported operation changed state")
	}
}

func TestPresignedURLsHonourTheirExpiry(t *testing.T) {
	now := time.Now()
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	e := newEnvWith(t, nil, false, func() time.Time { return *clock.Load() })
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	pc := s3.NewPresignClient(c)
	pp, err := pc.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/p")}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	send := func(method, u, body string) (int, string) {
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	later := now.Add(2 * time.Minute)
	clock.Store(&later)
	before := e.fingerprint("b/r")
	if st, out := send(http.MethodPut, pp.URL, "x"); st != 403 || !strings.Contains(out, "Request has expired") {
		t.Fatalf("expired presigned PUT: %d %s", st, out)
	}
	if st, out := send(http.MethodPut, strings.Replace(pp.URL, "/b/r/p", "/b/r/q", 1), "x"); st != 403 {
		t.Fatalf("presigned URL for another key: %d %s", st, out)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused presigned request changed state")
	}
	clock.Store(&now)
	if st, out := send(http.MethodPut, pp.URL, "x"); st != 200 {
		t.Fatalf("presigned PUT: %d %s", st, out)
	}
	pg, _ := pc.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("r/p")}, s3.WithPresignExpires(time.Minute))
	if st, out := send(http.MethodGet, pg.URL, ""); st != 200 || out != "x" {
		t.Fatalf("presigned GET: %d %q", st, out)
	}
}
