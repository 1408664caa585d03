package s3

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencegate/fencegate"
)

func testClient(fn func(o *s3.Options)) *s3.Client {
	o := s3.Options{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("AK", "SK", "")}
	fn(&o)
	return s3.New(o)
}

// TestPutTemplateIsWhereTheSDKSendsTheBucket: the bucket URL and SigV4
// scope of direct PUTs are the SDK's own (path-style endpoint, AWS
// virtual-hosted and path style); a bucket the SDK signs otherwise (S3
// Express session auth) or a client without credentials gets no template,
// so its writes keep the SDK path. Taking the template sends nothing.
func TestPutTemplateIsWhereTheSDKSendsTheBucket(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	for _, tc := range []struct {
		name, bucket string
		opts         func(o *s3.Options)
		want         *putTemplate
	}{
		{"path-style endpoint", "bkt", func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(srv.URL), true },
			&putTemplate{base: srv.URL + "/bkt", region: "eu-west-1", service: "s3"}},
		{"AWS virtual-hosted", "bkt", func(o *s3.Options) {},
			&putTemplate{base: "https://bkt.s3.eu-west-1.amazonaws.com", region: "eu-west-1", service: "s3"}},
		{"AWS path style", "bkt", func(o *s3.Options) { o.UsePathStyle = true },
			&putTemplate{base: "https://s3.eu-west-1.amazonaws.com/bkt", region: "eu-west-1", service: "s3"}},
		{"S3 Express directory bucket", "bkt--euw1-az1--x-s3", func(o *s3.Options) {}, nil},
		{"no credentials", "bkt", func(o *s3.Options) { o.Credentials = nil }, nil},
		{"S3 on Outposts (another signing name)", "arn:aws:s3-outposts:eu-west-1:123456789012:outpost/op-01ac5d28a6a232904/accesspoint/ap",
			func(o *s3.Options) {}, nil},
		{"access point ARN", "arn:aws:s3:eu-west-1:123456789012:accesspoint/ap", func(o *s3.Options) {},
			&putTemplate{base: "https://ap-123456789012.s3-accesspoint.eu-west-1.amazonaws.com", region: "eu-west-1", service: "s3"}},
	} {
		got := putTemplateOf(testClient(tc.opts), tc.bucket)
		if got != nil {
			if got.hc == nil || got.creds == nil || got.retryer == nil {
				t.Errorf("%s: template without the client's HTTP client, credentials or retryer", tc.name)
			}
			got = &putTemplate{base: got.base, region: got.region, service: got.service}
		}
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: template %+v; want %+v", tc.name, got, tc.want)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("taking templates sent %d requests", hits.Load())
	}
}

// TestDirectPutSignsTheConditionAndTheMetadata: a direct PUT is one
// presigned request whose signature covers the condition and the effect's
// metadata (a middlebox cannot strip or change them), expiring at its landing
// deadline, with the key's path escaped as the SDK escapes it.
func TestDirectPutSignsTheConditionAndTheMetadata(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		w.Header().Set("ETag", `"e2"`)
	}))
	defer srv.Close()
	st := New("d", testClient(func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(srv.URL), true }), "bkt", "pre")
	if st.tmpl == nil {
		t.Fatal("no put template for a path-style endpoint")
	}
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(10*time.Second))
	etag, err := st.Put(ctx, fencegate.PutRequest{Key: "a b/c+d", Body: strings.NewReader("xy"), Size: 2, IfMatch: `"e1"`,
		ContentType: "text/plain", Meta: fencegate.EffectMeta{FenceToken: 7, Segment: 2, ReceiptID: "rcpt-1"}})
	if err != nil || etag != `"e2"` {
		t.Fatalf("put: %q, %v", etag, err)
	}
	if got.Method != http.MethodPut || got.URL.EscapedPath() != "/bkt/pre/a%20b/c%2Bd" {
		t.Fatalf("sent %s %s", got.Method, got.URL.EscapedPath())
	}
	q := got.URL.Query()
	signed := ";" + q.Get("X-Amz-SignedHeaders") + ";"
	for _, h := range []string{"if-match", "x-amz-meta-fence-receipt-id", "x-amz-meta-fence-token", "x-amz-meta-fence-segment", "content-type", "host"} {
		if !strings.Contains(signed, ";"+h+";") {
			t.Errorf("header %s is not signed (X-Amz-SignedHeaders %s)", h, q.Get("X-Amz-SignedHeaders"))
		}
	}
	if got.Header.Get("If-Match") != `"e1"` || got.Header.Get("X-Amz-Meta-Fence-Receipt-Id") != "rcpt-1" || got.Header.Get("Authorization") != "" {
		t.Errorf("headers sent: %v", got.Header)
	}
	if e := q.Get("X-Amz-Expires"); e == "" || e == "0" || len(e) > 2 {
		t.Errorf("X-Amz-Expires %q for a deadline 10 s ahead", e)
	}
}

// TestOpenKeepsIdleConnectionsForConcurrentWrites: a store opened from a URL
// keeps idleConnsPerHost idle connections (the SDK's default, 10, makes every
// write beyond ten in flight open a new one).
func TestOpenKeepsIdleConnectionsForConcurrentWrites(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AK")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SK")
	t.Setenv("AWS_CONFIG_FILE", "/dev/null")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
	s, err := Open(context.Background(), "o", "s3://bkt?endpoint=http://127.0.0.1:1&pathStyle=true")
	if err != nil {
		t.Fatal(err)
	}
	b, ok := s.client.Options().HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		t.Fatalf("HTTP client %T", s.client.Options().HTTPClient)
	}
	if tr := b.GetTransport(); tr.MaxIdleConnsPerHost != idleConnsPerHost || tr.MaxIdleConns < idleConnsPerHost {
		t.Fatalf("idle connections kept: %d per host, %d in all; want %d", tr.MaxIdleConnsPerHost, tr.MaxIdleConns, idleConnsPerHost)
	}
}

// TestLargeDirectPutWaitsForContinue: a body of 2 MiB or more goes out with
// Expect: 100-continue, as the SDK sends it, so that a refused or failed
// write is answered before its body is sent; a small one without.
func TestLargeDirectPutWaitsForContinue(t *testing.T) {
	var expect []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		expect = append(expect, r.Header.Get("Expect"))
		w.Header().Set("ETag", `"e"`)
	}))
	defer srv.Close()
	st := New("d", testClient(func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(srv.URL), true }), "bkt", "")
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Minute))
	for _, n := range []int{1 << 10, 2 << 20} {
		if _, err := st.Put(ctx, fencegate.PutRequest{Key: "k", Body: strings.NewReader(strings.Repeat("x", n)), Size: int64(n),
			IfNoneMatch: true, Meta: fencegate.EffectMeta{FenceToken: 1, Segment: 1, ReceiptID: "r"}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(expect) != 2 || expect[0] != "" || expect[1] != "100-continue" {
		t.Fatalf("Expect headers sent for a 1 KiB and a 2 MiB body: %q", expect)
	}
}

// writeCounter counts the writes on the connections it dialled.
type writeCounter struct{ n atomic.Int32 }

func (w *writeCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return countedConn{c, w}, nil
}

type countedConn struct {
	net.Conn
	w *writeCounter
}

func (c countedConn) Write(p []byte) (int, error) { c.w.n.Add(1); return c.Conn.Write(p) }

// TestSmallDirectPutLeavesInOneWrite: the headers and the body of a small
// direct PUT (every 1 KiB gateway write) go out in one write, not the
// headers first and the body after (two writes, two reads at the store);
// the store receives the body intact, read from where the body stood.
func TestSmallDirectPutLeavesInOneWrite(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, string(b))
		w.Header().Set("ETag", `"e"`)
	}))
	defer srv.Close()
	var writes writeCounter
	hc := &http.Client{Transport: &http.Transport{DialContext: writes.dial}}
	st := New("d", testClient(func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle, o.HTTPClient = aws.String(srv.URL), true, hc }), "bkt", "")
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Minute))
	for _, n := range []int{1 << 10, inlineBodyMax} {
		want := strings.Repeat("x", n)
		body := strings.NewReader("skipped" + want + "after")
		if _, err := body.Seek(7, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		before := writes.n.Load()
		if _, err := st.Put(ctx, fencegate.PutRequest{Key: "k", Body: body, Size: int64(n), IfNoneMatch: true,
			Meta: fencegate.EffectMeta{FenceToken: 1, Segment: 1, ReceiptID: "r"}}); err != nil {
			t.Fatal(err)
		}
		if w := writes.n.Load() - before; n == 1<<10 && w != 1 {
			t.Errorf("a %d-byte PUT took %d writes, want 1", n, w)
		}
		if got[len(got)-1] != want {
			t.Errorf("a %d-byte PUT delivered %d bytes, not its body", n, len(got[len(got)-1]))
		}
	}
}
