package s3door_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fencegate/fencegate/s3door"
)

// The staging budget (Server.StagingBytes): what all open uploads' staged
// parts hold together, each part counting at least MinPartCharge.

// budgetEnv is a front door whose staging holds at most 12 MiB.
func budgetEnv(t *testing.T, now func() time.Time) *env {
	return newEnvServer(t, nil, false, now, func(s *s3door.Server) { s.StagingBytes = 12 << 20 })
}

// noRetry keeps the SDK from retrying a SlowDown, so the test sees it, and
// has its transport wait for "100 Continue" before it sends a part's body,
// as the AWS CLI does: the SDK asks for it (Expect: 100-continue) for parts
// over 2 MiB, but its requests carry no protocol version (ProtoMajor 0), so
// net/http's transport would send the body at once and race the refusal.
func noRetry(o *s3.Options) {
	o.Retryer = aws.NopRetryer{}
	tr := o.HTTPClient.(*http.Client).Transport.(*http.Transport).Clone()
	tr.ExpectContinueTimeout = 10 * time.Second
	o.HTTPClient = &http.Client{Transport: http11{tr}}
}

// http11 sends requests as HTTP/1.1 ones, so that Expect is honoured.
type http11 struct{ rt http.RoundTripper }

func (h http11) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	return h.rt.RoundTrip(r)
}

// mpu is one multipart upload of a test.
type mpu struct {
	t   *testing.T
	c   *s3.Client
	key string
	id  *string
}

func begin(t *testing.T, c *s3.Client, key string) *mpu {
	t.Helper()
	out, err := c.CreateMultipartUpload(context.Background(), &s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	return &mpu{t: t, c: c, key: key, id: out.UploadId}
}

// part sends part n of size bytes of fill.
func (u *mpu) part(n int32, size int, fill byte) (*s3.UploadPartOutput, error) {
	return u.c.UploadPart(context.Background(), &s3.UploadPartInput{Bucket: aws.String("b"), Key: aws.String(u.key), UploadId: u.id,
		PartNumber: aws.Int32(n), Body: bytes.NewReader(bytes.Repeat([]byte{fill}, size))})
}

// mustPart is part that must be accepted.
func (u *mpu) mustPart(n int32, size int, fill byte) *s3.UploadPartOutput {
	u.t.Helper()
	out, err := u.part(n, size, fill)
	if err != nil {
		u.t.Fatalf("part %d of %s (%d bytes): %v", n, u.key, size, err)
	}
	return out
}

// refused checks that err is the staging budget's refusal.
func refused(t *testing.T, err error, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s was accepted beyond the staging budget", what)
	}
	code, msg, status := apiCode(t, err)
	if code != "SlowDown" || status != http.StatusServiceUnavailable || !strings.HasPrefix(msg, "RESOURCE_BUSY: ") || !strings.Contains(msg, "(s3StagingBytes)") {
		t.Fatalf("%s: %d %s %q, want 503 SlowDown RESOURCE_BUSY naming s3StagingBytes", what, status, code, msg)
	}
}

// Rule: a part that would take what staging holds past its budget is
// refused (503 SlowDown, RESOURCE_BUSY) before it is read, and the refusal
// changes nothing: no file, and the budget it did not take is still there.
func TestAPartBeyondTheStagingBudgetIsRefusedAndChangesNothing(t *testing.T) {
	e := budgetEnv(t, nil)
	a := begin(t, e.client(e.lease("AKIDA", owner, "b/r"), noRetry), "r/a")
	b := begin(t, e.client(e.lease("AKIDB", "spiffe://test/other", "b/o"), noRetry), "o/b")
	a.mustPart(1, 6<<20, 'a')
	files := e.filesUnder("")
	_, err := b.part(1, 7<<20, 'b') // 6 + 7 MiB > 12 MiB
	refused(t, err, "a part past the budget")
	if got := e.filesUnder(""); got != files {
		t.Fatalf("the refused part left files: %d, %d before", got, files)
	}
	lp, err := b.c.ListParts(context.Background(), &s3.ListPartsInput{Bucket: aws.String("b"), Key: aws.String(b.key), UploadId: b.id})
	if err != nil || len(lp.Parts) != 0 {
		t.Fatalf("the refused part is listed: %+v %v", lp, err)
	}
	b.mustPart(1, 6<<20, 'b')  // exactly the rest of the budget: the refusal took none of it
	_, err = a.part(2, 1, 'a') // a part of one byte still counts MinPartCharge
	refused(t, err, "a 1-byte part with the budget spent")
}

// Rule: a part refused for the staging budget leaves the part of its number
// staged before as it was: listed with its ETag and size, and completed.
func TestAPartRefusedForTheBudgetLeavesThePartOfItsNumberIntact(t *testing.T) {
	e := budgetEnv(t, nil)
	u := begin(t, e.client(e.lease("AKIDA", owner, "b/r"), noRetry), "r/k")
	first := u.mustPart(1, 6<<20, 'a')
	_, err := u.part(1, 7<<20, 'b') // the new part is read beside the old: 6 + 7 MiB
	refused(t, err, "a larger part 1 again")
	ctx := context.Background()
	lp, err := u.c.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String("b"), Key: aws.String(u.key), UploadId: u.id})
	if err != nil || len(lp.Parts) != 1 || aws.ToString(lp.Parts[0].ETag) != aws.ToString(first.ETag) || aws.ToInt64(lp.Parts[0].Size) != 6<<20 {
		t.Fatalf("part 1 after the refusal: %+v %v", lp, err)
	}
	if _, err := u.c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String(u.key), UploadId: u.id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: first.ETag}}}}); err != nil {
		t.Fatal(err)
	}
	out, err := u.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String(u.key)})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	_, _ = got.ReadFrom(out.Body)
	out.Body.Close()
	if !bytes.Equal(got.Bytes(), bytes.Repeat([]byte{'a'}, 6<<20)) {
		t.Fatalf("the object is not the first part 1 (%d bytes)", got.Len())
	}
}

// Rule: an upload's staged bytes go back to the budget when it is aborted,
// completed, or forgotten idle; a part sent again counts once.
func TestTheStagingBudgetIsFreedByAbortCompleteAndIdle(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	e := budgetEnv(t, clock)
	ctx := context.Background()
	c := e.client(e.lease("AKIDA", owner, "b/r"), noRetry)
	a, b := begin(t, c, "r/a"), begin(t, c, "r/b")
	a.mustPart(1, 4<<20, 'a')
	a.mustPart(1, 4<<20, 'a') // sent again: it replaces itself, 4 MiB held, not 8
	a.mustPart(2, 4<<20, 'a')
	_, err := b.part(1, 8<<20, 'b')
	refused(t, err, "8 MiB beside 8 MiB")
	if _, err := c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String(a.key), UploadId: a.id}); err != nil {
		t.Fatal(err)
	}
	p := b.mustPart(1, 8<<20, 'b') // a's 8 MiB went back at its abort

	d := begin(t, c, "r/d")
	_, err = d.part(1, 8<<20, 'd')
	refused(t, err, "8 MiB beside b's 8 MiB")
	if _, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String(b.key), UploadId: b.id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: p.ETag}}}}); err != nil {
		t.Fatal(err)
	}
	d.mustPart(1, 8<<20, 'd') // b's 8 MiB went back at its completion

	f := begin(t, c, "r/f")
	_, err = f.part(1, 8<<20, 'f')
	refused(t, err, "8 MiB beside d's 8 MiB")
	mu.Lock()
	now = now.Add(s3door.UploadIdle + time.Minute)
	mu.Unlock()
	e.kit.Set(now)
	e.lease("AKIDC", owner, "b/r") // a lease with a proof fresh at the new time
	big := strings.Repeat("g", 8<<20)
	code, out := e.sendAt(t, "AKIDC", "POST", "/b/r/g?uploads", nil, "", now)
	if code != http.StatusOK {
		t.Fatalf("an upload after the others went idle: %d %s", code, out)
	}
	id := out[strings.Index(out, "<UploadId>")+len("<UploadId>") : strings.Index(out, "</UploadId>")]
	if code, out := e.sendAt(t, "AKIDC", "PUT", "/b/r/g?partNumber=1&uploadId="+id, nil, big, now); code != http.StatusOK {
		t.Fatalf("8 MiB once d went idle: %d %s", code, out) // d's 8 MiB went back when it was forgotten
	}
}

// countingBody counts the bytes the door reads of a request body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// countBodyReads counts, from now on, the bytes the door reads of request
// bodies.
func (e *env) countBodyReads() *atomic.Int64 {
	read := new(atomic.Int64)
	door := e.srv.Config.Handler
	e.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = countingBody{r.Body, read}
		door.ServeHTTP(w, r)
	})
	return read
}

// Rule: a decoded aws-chunked body is read no further than its declared
// length: a part declaring 1 byte (charged 1 MiB of the budget) and
// streaming 8 MiB of chunks is refused IncompleteBody having read a small
// part of them, not spooled whole before its length is compared.
func TestAChunkedPartIsReadNoFurtherThanItsDeclaredLength(t *testing.T) {
	e := budgetEnv(t, nil)
	u := begin(t, e.client(e.lease("AKIDA", owner, "b/r"), noRetry), "r/k")
	read := e.countBodyReads()
	req, _ := e.signed(t, "AKIDA", "/b/r/k?partNumber=1&uploadId="+*u.id, "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
		map[string]string{"Content-Encoding": "aws-chunked", "X-Amz-Decoded-Content-Length": "1"}, "", time.Now())
	var body bytes.Buffer
	chunk := strings.Repeat("x", 1<<20)
	for range 8 {
		fmt.Fprintf(&body, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	body.WriteString("0\r\n\r\n")
	req.Body, req.ContentLength = io.NopCloser(&body), -1
	resp, err := e.srv.Client().Do(req)
	if err == nil {
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(out), "IncompleteBody") {
			t.Fatalf("a part streaming past its declared length: %d %s", resp.StatusCode, out)
		}
	}
	if n := read.Load(); n > 1<<20 {
		t.Fatalf("the door read %d bytes of a part that declared 1", n)
	}
	if n := e.filesUnder(""); n != 0 {
		t.Fatalf("%d files left in the spool", n)
	}
}
