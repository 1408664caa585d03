package s3_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/objecttest"
	s3store "github.com/fencegate/fencegate/backends/s3"
)

// lingeringClient is an HTTP client to a store that answers a PUT's first
// attempt 503 SlowDown after taking only the start of its body, and whose
// transport goes on reading that body after Do returned (as net/http's may:
// its write loop ends on its own). Its reads of the first attempt's body
// run as the retry starts, from the retry's own goroutine or from another.
type lingeringClient struct {
	concurrent bool // the first attempt's reads run in a goroutine of their own

	mu       sync.Mutex
	attempts int
	first    io.ReadCloser // the first attempt's body
	lateRead error         // what a read of first got once the retry had begun
	lateN    int
	sent     [][]byte // the bodies of the later attempts as the store took them
}

func (c *lingeringClient) Do(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.attempts++
	n := c.attempts
	c.mu.Unlock()
	answer := func(status int, hdr http.Header, body string) *http.Response {
		hdr.Set("Content-Length", strconv.Itoa(len(body)))
		return &http.Response{StatusCode: status, Header: hdr, Body: io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: r}
	}
	if n == 1 {
		_, _ = io.ReadFull(r.Body, make([]byte, 1<<10)) // the start of the body, then the answer
		c.first = r.Body
		return answer(http.StatusServiceUnavailable, http.Header{"Content-Type": {"application/xml"}},
			"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"), nil
	}
	// The retry has rewound the shared body; the first attempt's transport
	// reads on.
	late := func() {
		n, err := c.first.Read(make([]byte, 16<<10))
		c.mu.Lock()
		c.lateN, c.lateRead = n, err
		c.mu.Unlock()
	}
	if c.concurrent {
		done := make(chan struct{})
		go func() { defer close(done); late() }()
		b, _ := io.ReadAll(r.Body)
		<-done
		c.record(b)
	} else {
		late()
		b, _ := io.ReadAll(r.Body)
		c.record(b)
	}
	return answer(http.StatusOK, http.Header{"Etag": {`"e"`}}, ""), nil
}

func (c *lingeringClient) record(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent = append(c.sent, b)
}

type noBackoff struct{}

func (noBackoff) BackoffDelay(int, error) (time.Duration, error) { return 0, nil }

// TestDirectPutRetrySendsItsWholeBodyWhileAnEarlierAttemptReadsOn: a
// direct PUT's retry rewinds the body all attempts share. Once it has, the
// earlier attempt (whose transport may still be reading it after the store
// answered 503 SlowDown early) can read none of it: its reads fail, and the
// retry sends the whole body, byte for byte. Run with -race too: with the
// earlier attempt's reads in a goroutine of their own, the shared body is
// never read by two at once.
func TestDirectPutRetrySendsItsWholeBodyWhileAnEarlierAttemptReadsOn(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		hc := &lingeringClient{concurrent: concurrent}
		cl := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://store.invalid"), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider("ak", "sk", ""), HTTPClient: hc,
			Retryer: retry.NewStandard(func(o *retry.StandardOptions) { o.Backoff = noBackoff{}; o.MaxAttempts = 3 })})
		st := s3store.New("retry", cl, "bucket", "")
		if !s3store.Direct(st) {
			t.Fatal("no direct PUT path for the test's client")
		}
		body := make([]byte, 64<<10) // above the bodies sent from memory
		for i := range body {
			body[i] = byte(i * 7)
		}
		ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Minute))
		etag, err := st.Put(ctx, fencegate.PutRequest{Key: "k", Body: bytes.NewReader(body), Size: int64(len(body)),
			IfNoneMatch: true, Meta: objecttest.Meta(1)})
		if err != nil || etag != `"e"` {
			t.Fatalf("concurrent=%v: put %q, %v; want the retry's answer", concurrent, etag, err)
		}
		if hc.attempts != 2 || len(hc.sent) != 1 {
			t.Fatalf("concurrent=%v: %d attempts; want a 503 and a retry", concurrent, hc.attempts)
		}
		if hc.lateRead == nil || hc.lateN != 0 {
			t.Errorf("concurrent=%v: the first attempt read %d bytes of the shared body after the retry began (%v)", concurrent, hc.lateN, hc.lateRead)
		}
		if !bytes.Equal(hc.sent[0], body) {
			t.Errorf("concurrent=%v: the retry sent %d bytes that are not the body (%d)", concurrent, len(hc.sent[0]), len(body))
		}
	}
}
