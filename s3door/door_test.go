package s3door_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fencegate/fencegate"
)

const owner = "spiffe://test/worker-a"

func apiCode(t *testing.T, err error) (code, message string, status int) {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("want an S3 error, got %v", err)
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return ae.ErrorCode(), ae.ErrorMessage(), status
}

// rawHeader has one call record its HTTP answer's headers in h.
func rawHeader(h *http.Header) func(*s3.Options) {
	return func(o *s3.Options) { o.HTTPClient = recorder{h} }
}

type recorder struct{ h *http.Header }

func (r recorder) Do(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		*r.h = resp.Header.Clone()
	}
	return resp, err
}

func TestPutGetHeadListDeleteThroughTheSDK(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/reports"))
	ctx := context.Background()
	var hdr http.Header
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("reports/a.txt"),
		Body: strings.NewReader("hello"), ContentType: aws.String("text/plain")}, rawHeader(&hdr))
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	id := hdr.Get("Fence-Receipt")
	r, err := e.fences.Receipt(ctx, id)
	if err != nil || r.State != fencegate.ReceiptCommitted || r.Segment != 1 || r.Target != "objects/b/reports/a.txt" {
		t.Fatalf("receipt %q: %+v %v", id, r, err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("reports/sub/b.txt"),
		Body: strings.NewReader("world!")}, rawHeader(&hdr)); err != nil {
		t.Fatalf("put 2: %v", err)
	}
	if r, _ := e.fences.Receipt(ctx, hdr.Get("Fence-Receipt")); r.Segment != 2 {
		t.Fatalf("second write got segment %d, want 2 (arrival order)", r.Segment)
	}
	got, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("reports/a.txt")})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	b, _ := io.ReadAll(got.Body)
	if string(b) != "hello" || aws.ToString(got.ContentType) != "text/plain" {
		t.Fatalf("get: %q %q", b, aws.ToString(got.ContentType))
	}
	rng, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("reports/a.txt"), Range: aws.String("bytes=1-3")})
	if err != nil {
		t.Fatalf("ranged get: %v", err)
	}
	if b, _ := io.ReadAll(rng.Body); string(b) != "ell" {
		t.Fatalf("ranged get: %q", b)
	}
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("reports/sub/b.txt")})
	if err != nil || aws.ToInt64(head.ContentLength) != 6 || head.LastModified == nil {
		t.Fatalf("head: %+v %v", head, err)
	}
	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("b"), Prefix: aws.String("reports/"), Delimiter: aws.String("/")})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(list.Contents) != 1 || aws.ToString(list.Contents[0].Key) != "reports/a.txt" || len(list.CommonPrefixes) != 1 ||
		aws.ToString(list.CommonPrefixes[0].Prefix) != "reports/sub/" {
		t.Fatalf("list: %+v", list)
	}
	all := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String("b"), MaxKeys: aws.Int32(1)})
	var keys []string
	for all.HasMorePages() {
		p, err := all.NextPage(ctx)
		if err != nil {
			t.Fatalf("page: %v", err)
		}
		for _, o := range p.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	if strings.Join(keys, ",") != "reports/a.txt,reports/sub/b.txt" {
		t.Fatalf("paged list: %v", keys)
	}
	buckets, err := c.ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil || len(buckets.Buckets) != 1 || aws.ToString(buckets.Buckets[0].Name) != "b" {
		t.Fatalf("buckets: %+v %v", buckets, err)
	}
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("b"), Key: aws.String("reports/a.txt")}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	_, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("reports/a.txt")})
	var nf *types.NotFound
	if !errors.As(err, &nf) {
		t.Fatalf("head after delete: %v", err)
	}
	_, err = c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("reports/a.txt")})
	if code, _, st := apiCode(t, err); code != "NoSuchKey" || st != 404 {
		t.Fatalf("get after delete: %s %d", code, st)
	}
	if n := e.store.deletes.Load(); n != 1 {
		t.Fatalf("deletes forwarded: %d", n)
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// TestUserMetadataIsKeptBesideTheEffectsOwn: a client's x-amz-meta-* is
// stored beside the fence metadata, which it cannot forge, within S3's 2 KB
// less what the fence metadata may take.
func TestUserMetadataIsKeptBesideTheEffectsOwn(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/m"), Body: strings.NewReader("x"),
		Metadata: map[string]string{"mtime": "1700000000.5", "fence-receipt-id": "forged"}}); err != nil {
		t.Fatal(err)
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("r/m")})
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata["mtime"] != "1700000000.5" || !strings.HasPrefix(h.Metadata["fence-receipt-id"], "rcpt_") {
		t.Fatalf("metadata: %v", h.Metadata)
	}
	big := map[string]string{"a": strings.Repeat("v", 2100)}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/m2"), Body: strings.NewReader("x"), Metadata: big})
	if code, _, _ := apiCode(t, err); code != "MetadataTooLarge" {
		t.Fatalf("2 KB of metadata: %s", code)
	}
	// Under S3's 2 KB, but with the fence metadata beside it over: refused
	// before admission (no receipt, the resource as it was), where a store
	// refused it after (a receipt left, and a 503 to retry for ever).
	before, _ := e.fences.Resource(ctx, "objects/b/r")
	within := map[string]string{"a": strings.Repeat("v", 2<<10-fencegate.MaxEffectMetaSize)}
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/m3"), Body: strings.NewReader("x"), Metadata: within})
	if code, _, _ := apiCode(t, err); code != "MetadataTooLarge" {
		t.Fatalf("%d bytes of metadata, over what the fence metadata leaves: %s", len(within["a"])+1, code)
	}
	if after, _ := e.fences.Resource(ctx, "objects/b/r"); after != before {
		t.Fatalf("a refused write moved the resource: %+v -> %+v", before, after)
	}
	fits := map[string]string{"a": strings.Repeat("v", 2<<10-fencegate.MaxEffectMetaSize-1)}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/m3"), Body: strings.NewReader("x"), Metadata: fits}); err != nil {
		t.Fatalf("metadata within what the fence metadata leaves: %v", err)
	}
}

// Rule: a Content-Type the object could not keep (over
// fencegate.MaxContentType) is InvalidArgument before anything is admitted
// or staged, for a PutObject and a multipart upload alike; versitygw
// answered a 4 KiB one 500 after the admission, leaving the receipt in doubt.
func TestAnOversizedContentTypeIsRefusedBeforeAdmission(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	before, _ := e.fences.Resource(ctx, "objects/b/r")
	long := "text/plain; x=" + strings.Repeat("a", fencegate.MaxContentType)
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/ct"), Body: strings.NewReader("x"), ContentType: aws.String(long)})
	if code, _, _ := apiCode(t, err); code != "InvalidArgument" {
		t.Fatalf("PutObject with a %d-byte Content-Type: %s", len(long), code)
	}
	_, err = c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/ct"), ContentType: aws.String(long)})
	if code, _, _ := apiCode(t, err); code != "InvalidArgument" {
		t.Fatalf("CreateMultipartUpload with a %d-byte Content-Type: %s", len(long), code)
	}
	if after, _ := e.fences.Resource(ctx, "objects/b/r"); after != before {
		t.Fatalf("a refused write moved the resource: %+v -> %+v", before, after)
	}
	if es, _ := os.ReadDir(filepath.Join(e.spool, "s3-uploads")); len(es) != 0 {
		t.Fatalf("a refused create staged %d upload directories", len(es))
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/ct"), Body: strings.NewReader("x"), ContentType: aws.String("text/plain; charset=utf-8")}); err != nil {
		t.Fatalf("an ordinary Content-Type: %v", err)
	}
}

// TestConcurrentWritesOfOneLeaseGetConsecutiveSegments: unnumbered writes
// racing under one lease are numbered 1..n in arrival order, none refused
// or quarantined.
func TestConcurrentWritesOfOneLeaseGetConsecutiveSegments(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	const n = 12
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- put(c, fmt.Sprintf("r/k%d", i), fmt.Sprintf("body %d", i)) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent put: %v", err)
		}
	}
	rs, err := e.fences.Resource(context.Background(), "b/r")
	if err != nil || rs.LastSegmentSeq != n {
		t.Fatalf("resource after %d writes: %+v %v", n, rs, err)
	}
	seen := map[uint64]bool{}
	p, _ := e.fences.ReceiptsByResource(context.Background(), "b/r", fencegate.Page{Limit: 100})
	for _, r := range p.Receipts {
		if r.State != fencegate.ReceiptCommitted || seen[r.Segment] {
			t.Fatalf("receipt %+v", r)
		}
		seen[r.Segment] = true
	}
	q, _ := e.fences.Quarantined(context.Background(), "", fencegate.Page{Limit: 10})
	if len(seen) != n || len(q.Records) != 0 {
		t.Fatalf("%d segments, %d quarantined", len(seen), len(q.Records))
	}
}

func TestDeleteObjectsFencesEachKey(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	for _, k := range []string{"r/1", "r/2"} {
		if err := put(c, k, "x"); err != nil {
			t.Fatal(err)
		}
	}
	out, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("b"), Delete: &types.Delete{Objects: []types.ObjectIdentifier{
		{Key: aws.String("r/1")}, {Key: aws.String("r/2")}, {Key: aws.String("elsewhere/3")}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Deleted) != 2 || len(out.Errors) != 1 || aws.ToString(out.Errors[0].Key) != "elsewhere/3" ||
		!strings.HasPrefix(aws.ToString(out.Errors[0].Message), "RESOURCE_MISMATCH") {
		t.Fatalf("deleted %d, errors %+v", len(out.Deleted), out.Errors)
	}
	if n := e.store.deletes.Load(); n != 2 {
		t.Fatalf("deletes forwarded: %d", n)
	}
	rs, _ := e.fences.Resource(ctx, "b/r")
	if rs.LastSegmentSeq != 4 {
		t.Fatalf("segments after two puts and two deletes: %d", rs.LastSegmentSeq)
	}
}

// TestAnHTMLObjectIsServedAsInertData: the front door shares its origin
// with the console, so an object a workload stored as text/html must not
// run there when an operator opens it: every object read says nosniff and
// gives the document a sandbox (an origin of its own), so its script cannot
// post the console's forms with the operator's cookie.
func TestAnHTMLObjectIsServedAsInertData(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/reports"))
	ctx := context.Background()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("reports/x.html"),
		Body: strings.NewReader("<script>fetch('/console/modes',{method:'POST'})</script>"), ContentType: aws.String("text/html")}); err != nil {
		t.Fatalf("put: %v", err)
	}
	var hdr http.Header
	if _, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String("reports/x.html")}, rawHeader(&hdr)); err != nil {
		t.Fatalf("get: %v", err)
	}
	if hdr.Get("X-Content-Type-Options") != "nosniff" || hdr.Get("Content-Security-Policy") != "sandbox" {
		t.Fatalf("an HTML object served with X-Content-Type-Options %q, Content-Security-Policy %q; want nosniff and sandbox",
			hdr.Get("X-Content-Type-Options"), hdr.Get("Content-Security-Policy"))
	}
}

// TestNonASCIIMetadataTravelsAsAmazonS3Sends: metadata a client sends as
// RFC 2047 encoded words (as Amazon S3 asks for non-ASCII values) is kept
// as the text they encode, and HEAD answers it encoded the same way, as
// Amazon S3 does; so are operation IDs that are not ASCII. Printable ASCII
// goes as it is.
func TestNonASCIIMetadataTravelsAsAmazonS3Sends(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/u"), Body: strings.NewReader("x"),
		Metadata: map[string]string{"title": "=?UTF-8?B?Q3LDqG1lIGJyw7tsw6ll?=", "plain": "ascii"}}); err != nil {
		t.Fatal(err)
	}
	_, info, err := e.store.Get(ctx, "r/u")
	if err != nil {
		t.Fatal(err)
	}
	if info.Metadata["title"] != "Crème brûlée" {
		t.Fatalf("stored title %q, want the text the words encode", info.Metadata["title"])
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("r/u")})
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata["plain"] != "ascii" || fencegate.DecodeHeaderText(h.Metadata["title"]) != "Crème brûlée" || h.Metadata["title"] == "Crème brûlée" {
		t.Fatalf("HEAD metadata %q: want ascii as it is and the title as encoded words", h.Metadata)
	}
}

// TestPrintableASCIIMetadataComesBackAsSent: printable ASCII metadata goes
// back as it is, even holding "=?" (a URL's query), and so does a value an
// object kept as encoded words (one the door stored before it decoded
// them): never encoded a second time. Amazon S3 encodes only what is not
// ASCII.
func TestPrintableASCIIMetadataComesBackAsSent(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	ctx := context.Background()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/l"), Body: strings.NewReader("x"),
		Metadata: map[string]string{"link": "https://x.example/p?a=?b"}}); err != nil {
		t.Fatal(err)
	}
	words := "=?UTF-8?B?Q3LDqG1lIGJyw7tsw6ll?="
	if _, err := e.store.Put(ctx, fencegate.PutRequest{Key: "r/old", Body: strings.NewReader("x"), Size: 1, IfNoneMatch: true,
		UserMeta: map[string]string{"title": words}}); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string][2]string{"r/l": {"link", "https://x.example/p?a=?b"}, "r/old": {"title", words}} {
		h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Metadata[want[0]]; got != want[1] {
			t.Fatalf("HEAD %s %s = %q, want %q as kept", key, want[0], got, want[1])
		}
	}
}
