package s3

import (
	"bytes"
	"cmp"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/encoding/httpbinding"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/fencegate/fencegate"
)

// A single PUT with a landing deadline (every write the gateway forwards) is
// sent as one presigned HTTP request built here, not through the SDK's
// operation stack: that stack resolves the endpoint, builds the user agent,
// signs the request with an Authorization header (which presignWrite then
// replaces, a second signature) and runs some forty middlewares per attempt,
// several times the CPU and allocations of the request itself
// (BenchmarkPutClientCPU). What it decides for a store does not change
// between writes, so it is taken from the SDK once, in putTemplateOf: the
// URL of the bucket (endpoint resolution, path or virtual-host style; S3's
// endpoint rules do not read the key) and the SigV4 scope. Per write only
// the key is appended and the request presigned once (presignWrite.presign,
// the same X-Amz-Expires rule and signed headers as the SDK path). The
// client's own HTTP client, credentials and retryer are used, with the SDK's
// retry rules (directRetry); errors are the SDK's types (awshttp.ResponseError
// carrying a smithy.APIError), so errors.go reads both paths alike. A store
// whose presigned URL does not have the expected shape (S3 Express session
// auth, SigV4a, anything unknown) keeps the SDK path (putTemplateOf: nil).
//
// What is left per write is the SDK's SigV4 presigner (v4.Signer, one for
// all writes, its derived keys cached: about half the allocations and a
// fifth of the client CPU of a PUT), net/http's round trip, and the header,
// which p.header builds in one pass with the names the SDK gives it
// (TestDirectPutSendsTheHeadersTheSDKSends). A small body leaves in the same
// write as the headers (attemptBody). The body is never hashed: a presigned
// request's payload is UNSIGNED-PAYLOAD (landby.go); the gateway's own
// SHA-256 of the body could not be sent as a signed x-amz-content-sha256
// instead, since versitygw v1.8.0 checks presigned signatures against
// UNSIGNED-PAYLOAD only (s3api/utils/presign-auth-reader.go), and it would
// only add the store's hashing of every body.

// putTemplate is where a presigned PutObject of this store goes.
type putTemplate struct {
	// base is scheme://host[/path of the bucket], escaped: the key's escaped
	// path ("/" + EscapePath(key)) is appended.
	base string
	// region and service of the SigV4 scope.
	region, service string
	// The client's own, read once (Options copies them on every call).
	hc      s3.HTTPClient
	creds   aws.CredentialsProvider
	retryer aws.Retryer
	// continueAt: bodies of at least this many bytes are sent with
	// Expect: 100-continue, as the SDK sends them (so a refusal, a failed
	// condition or an expired signature is answered before the body is
	// sent); -1: never.
	continueAt int64
}

// default100ContinueBytes is the SDK's threshold for Expect: 100-continue
// (service/internal/s3shared, used when Options.ContinueHeaderThresholdBytes is 0).
const default100ContinueBytes = 2 << 20

// templateKey is the key the SDK presigns to find the template.
const templateKey = "fencegate-template"

// putTemplateOf presigns a PutObject of templateKey with the SDK (no request
// is sent; the credentials are placeholders, only the URL's shape is read)
// and takes the bucket's URL and the signing scope from it. nil: the shape
// is not the plain SigV4 one this path builds; every write takes the SDK path.
func putTemplateOf(client *s3.Client, bucket string) *putTemplate {
	o := client.Options()
	if o.Credentials == nil || o.HTTPClient == nil || o.Retryer == nil {
		return nil
	}
	if strings.HasSuffix(bucket, "--x-s3") {
		return nil // an S3 Express directory bucket: session auth, and presigning it would open a session
	}
	pc := s3.NewPresignClient(client, func(o *s3.PresignOptions) {
		o.ClientOptions = append(o.ClientOptions, func(o *s3.Options) {
			o.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: "TEMPLATE", SecretAccessKey: "TEMPLATE", Source: "fencegate"}, nil
			})
		})
	})
	p, err := pc.PresignPutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(templateKey)})
	if err != nil || p.Method != http.MethodPut {
		return nil
	}
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.Fragment != "" {
		return nil
	}
	base, ok := strings.CutSuffix(u.EscapedPath(), "/"+templateKey)
	if !ok {
		return nil
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature", "x-id":
		default:
			return nil // a parameter this path would not send (a session token of S3 Express, say)
		}
	}
	scope := strings.Split(q.Get("X-Amz-Credential"), "/")
	if q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" || len(scope) != 5 || scope[3] != "s3" || scope[4] != "aws4_request" {
		return nil
	}
	for h := range p.SignedHeader {
		if h != "Host" {
			return nil // the SDK would send a header this path does not
		}
	}
	return &putTemplate{base: u.Scheme + "://" + u.Host + base, region: scope[2], service: scope[3],
		hc: o.HTTPClient, creds: o.Credentials, retryer: o.Retryer, continueAt: cmp.Or(o.ContinueHeaderThresholdBytes, default100ContinueBytes)}
}

// putObject is what one direct PUT sends.
type putObject struct {
	key         string // full key (prefix included)
	body        io.ReadSeeker
	start, size int64
	contentType string
	meta        map[string]string
	ifNoneMatch bool
	ifMatch     string
}

// putDirect sends p presigned until until (signed at at; zero: at each
// attempt's time), retrying as the client's retryer says; each HTTP request
// sent is counted in sent. It returns the ETag.
func (s *Store) putDirect(ctx context.Context, t *putTemplate, p putObject, until, at time.Time, sent *attemptCounter) (string, error) {
	uri := t.base + "/" + httpbinding.EscapePath(p.key, false)
	sign := presignWrite{until: until, at: at, creds: t.creds, signer: presigner}
	var etag string
	err := directRetry(ctx, t.retryer, func() error {
		sent.n.Add(1)
		if _, err := p.body.Seek(p.start, io.SeekStart); err != nil {
			return err
		}
		r, err := http.NewRequestWithContext(ctx, http.MethodPut, uri, nil)
		if err != nil {
			return err
		}
		r.ContentLength, r.GetBody = p.size, nil // no GetBody: the transport never resends a PUT itself
		if r.Body, err = p.attemptBody(); err != nil {
			return err
		}
		// Ended before the next attempt rewinds p.body (attemptReader).
		defer r.Body.Close()
		r.Header = p.header(t.continueAt)
		now := at
		if now.IsZero() {
			now = time.Now()
		}
		if err := sign.presignScoped(ctx, r, now, t.region, t.service); err != nil {
			return err
		}
		resp, err := t.hc.Do(r)
		if err != nil {
			return &smithy.OperationError{ServiceID: s3.ServiceID, OperationName: "PutObject", Err: &smithyhttp.RequestSendError{Err: err}}
		}
		defer resp.Body.Close()
		etag, err = putAnswer(resp)
		return err
	})
	return etag, err
}

// inlineBodyMax is the largest body a direct PUT reads into memory before
// sending it: net/http writes the headers of a request whose body is one of
// its in-memory readers (*bytes.Reader) into the same buffered write as the
// body, and flushes them in a write of their own before any other body
// (transferWriter.FlushHeaders, Go issue 22088), so a small body would take
// two writes, and the store two reads, instead of one. 4 KiB is the
// transport's write buffer (http.Transport.WriteBufferSize's default):
// beyond it the writes are as many either way.
const inlineBodyMax = 4 << 10

// attemptBody is the body of one attempt: p.size bytes from p.body (already
// at p.start), read into memory when they are at most inlineBodyMax, else
// read as the transport sends them, through an attemptReader that the
// attempt closes when it ends. A body shorter than p.size fails here,
// before anything is sent, or in the transport (the size it was told does
// not match).
func (p *putObject) attemptBody() (io.ReadCloser, error) {
	switch {
	case p.size <= 0:
		return http.NoBody, nil
	case p.size <= inlineBodyMax:
		buf := make([]byte, p.size)
		if _, err := io.ReadFull(p.body, buf); err != nil {
			return nil, fmt.Errorf("read the body: %w", err)
		}
		return io.NopCloser(bytes.NewReader(buf)), nil
	default:
		return &attemptReader{r: io.LimitReader(p.body, p.size)}, nil
	}
}

// errAttemptEnded is what a read of an attempt's body gets once the
// attempt has ended.
var errAttemptEnded = errors.New("s3: the body of an attempt read after the attempt ended")

// attemptReader is the body of one attempt of a direct PUT, read from the
// body all attempts share. net/http may go on reading a request's body after
// Do has returned: a store may answer before it has taken the body (503
// SlowDown, a failed condition), and "RoundTrip must always close the body,
// including on errors, but depending on the implementation may do so in a
// separate goroutine even after RoundTrip returns" (net/http.RoundTripper).
// The next attempt would then rewind and read the shared body while the
// last one's transport still reads it, and send bytes it took from the
// other. So an attempt closes its reader before it returns (putDirect):
// Close waits for a Read in progress, and every Read after it fails, so the
// shared body is read for one attempt at a time, from the retry's rewind on
// for the retry alone. The transport's own Close (when it is done with the
// body) ends it the same way.
type attemptReader struct {
	mu    sync.Mutex
	r     io.Reader
	ended bool
}

// Read reads from the shared body unless the attempt has ended.
func (a *attemptReader) Read(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		return 0, errAttemptEnded
	}
	return a.r.Read(p)
}

// Close ends the attempt: once it returns, no Read is in progress and none
// reads the shared body again.
func (a *attemptReader) Close() error {
	a.mu.Lock()
	a.ended = true
	a.mu.Unlock()
	return nil
}

// Header names and values of a direct PUT, in canonical form, so that
// building an attempt's header neither concatenates nor canonicalizes them.
const (
	hdrUserAgent     = "User-Agent"
	hdrAcceptEnc     = "Accept-Encoding"
	hdrExpect        = "Expect"
	hdrContentType   = "Content-Type"
	hdrIfNoneMatch   = "If-None-Match"
	hdrIfMatch       = "If-Match"
	hdrContentSHA256 = "X-Amz-Content-Sha256"
	unsignedPayload  = "UNSIGNED-PAYLOAD"
	// defaultContentType is the SDK's Content-Type for a PutObject body
	// without one (its serializer's default for a streaming payload).
	defaultContentType = "application/octet-stream"
	directUserAgent    = "fencegate aws-sdk-go-v2"
)

// metaHeaders are the header names of the effect's own metadata keys
// (domain.EffectMeta.Map), written once; any other key's name is built as
// the SDK builds it (metaHeader).
var metaHeaders = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{fencegate.MetaFence, fencegate.MetaSegment, fencegate.MetaRoot, fencegate.MetaOperationID,
		fencegate.MetaPayload, fencegate.MetaReceipt} {
		m[k] = textproto.CanonicalMIMEHeaderKey("X-Amz-Meta-" + k)
	}
	return m
}()

// metaHeader is the header of metadata key k: "X-Amz-Meta-" + k, canonical
// (what http.Header.Set makes of it).
func metaHeader(k string) string {
	if h, ok := metaHeaders[k]; ok {
		return h
	}
	return textproto.CanonicalMIMEHeaderKey("X-Amz-Meta-" + k)
}

// header is the header of one attempt of p: every value in one backing
// array, the map sized for all of them. The headers the signer ignores
// (User-Agent, Expect) are in it too; presignScoped signs the others as
// they are.
func (p *putObject) header(continueAt int64) http.Header {
	n := 5 + len(p.meta) // User-Agent, Accept-Encoding, Content-Type, the condition, X-Amz-Content-Sha256
	expect := continueAt >= 0 && p.size >= continueAt
	if expect {
		n++
	}
	h := make(http.Header, n)
	vals := make([]string, 0, n)
	set := func(k, v string) {
		vals = append(vals, v)
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	set(hdrUserAgent, directUserAgent)
	set(hdrAcceptEnc, "identity") // as the SDK: no transparent gzip
	if expect {
		set(hdrExpect, "100-continue")
	}
	// As the SDK's PutObject: a body without a type is sent as
	// application/octet-stream (S3 itself would store binary/octet-stream).
	set(hdrContentType, cmp.Or(p.contentType, defaultContentType))
	for k, v := range p.meta {
		set(metaHeader(k), v)
	}
	if p.ifNoneMatch {
		set(hdrIfNoneMatch, "*")
	} else {
		set(hdrIfMatch, p.ifMatch)
	}
	set(hdrContentSHA256, unsignedPayload)
	return h
}

// putAnswer reads a PutObject answer: the ETag of a 2xx, else the error the
// SDK would return (its code and message from the XML body). A 2xx whose
// body is an S3 <Error> document (S3 may send one after the status line) is
// an error with that status: not a definite refusal, so uncertain.
func putAnswer(resp *http.Response) (string, error) {
	if resp.StatusCode/100 == 2 && resp.ContentLength == 0 {
		return resp.Header.Get("ETag"), nil // no body to read (net/http's is NoBody): the connection is reusable as it is
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 && !strings.Contains(string(body), "<Error>") {
		return resp.Header.Get("ETag"), nil
	}
	var doc struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	_ = xml.Unmarshal(body, &doc)
	var api error = &smithy.GenericAPIError{Code: doc.Code, Message: doc.Message}
	if doc.Code == "" {
		api = fmt.Errorf("http %d, no error code (%v)", resp.StatusCode, rerr)
	}
	return "", &smithy.OperationError{ServiceID: s3.ServiceID, OperationName: "PutObject", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp}, Err: api},
		RequestID:     resp.Header.Get("X-Amz-Request-Id"),
	}}
}

// directRetry runs attempt as the SDK's retry middleware (aws/retry.Attempt)
// does: attempt tokens (adaptive mode), then, while the error is retryable
// and attempts remain, a retry-quota token and the retryer's delay. Unlike
// the middleware it does not correct clock skew (every write here is signed
// with the gateway's clock, as on the SDK path: presignWrite).
func directRetry(ctx context.Context, r aws.Retryer, attempt func() error) error {
	release := func(error) error { return nil }
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		releaseAttempt := func(error) error { return nil }
		if r2, ok := r.(aws.RetryerV2); ok {
			rel, err := r2.GetAttemptToken(ctx)
			if err != nil {
				return fmt.Errorf("failed to get retry Send token, %w", err)
			}
			releaseAttempt = rel
		}
		err := attempt()
		_ = release(err)
		_ = releaseAttempt(err)
		if err == nil || errors.Is(err, errLandByPassed) || !r.IsErrorRetryable(err) ||
			(r.MaxAttempts() > 0 && n >= r.MaxAttempts()) || ctx.Err() != nil {
			return err
		}
		rel, terr := r.GetRetryToken(ctx, err)
		if terr != nil {
			return errors.Join(err, terr)
		}
		release = rel
		d, derr := r.RetryDelay(n, err)
		if derr != nil {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
