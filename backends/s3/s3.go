// Package s3 is the fencegate.ObjectStore for Amazon S3 and S3-compatible
// stores. Every write is conditional (If-Match / If-None-Match: *), metadata
// travels with the object, and a failed condition returns an error whose cause
// is fencegate.ErrPreconditionFailed. It never creates buckets. Probe checks at
// start-up that the store really enforces the conditions. A single PUT with a
// landing deadline (every write the gateway forwards) is one presigned request
// built in directput.go, with the SDK client's HTTP client and retryer; every
// other call goes through the SDK.
//
// Uncertain outcomes: a Put or Delete that fails without a definite answer from
// the store (network error, timeout, 5xx) may have been applied; IsUncertain
// reports it. A write never sent (its landing deadline had passed) or refused
// with a definite 4xx on its only attempt carries fencegate.ErrNotApplied.
// Because the SDK retries such failures, a precondition failure may
// also follow our own applied write: callers reconcile by reading the object's
// metadata, as DESIGN §4 requires for every 412.
package s3

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencegate/fencegate"
)

// DefaultSinglePutLimit is the largest object written with one PutObject; larger
// objects use a multipart upload (S3's own single-PUT maximum).
const DefaultSinglePutLimit = 5 << 30

// DefaultPartSize is the multipart part size (raised as needed to stay within
// 10,000 parts).
const DefaultPartSize = 64 << 20

const (
	minPartSize     = 5 << 20
	maxParts        = 10000
	conflictRetries = 4
)

// Capabilities are the optional conditional operations a store honours.
type Capabilities struct {
	// ConditionalDelete: DeleteObject with If-Match refuses a wrong ETag.
	ConditionalDelete bool
	// ConditionalMultipart: CompleteMultipartUpload honours If-None-Match / If-Match.
	ConditionalMultipart bool
}

// Store is an S3-backed fencegate.ObjectStore over one bucket and key prefix.
// It is safe for concurrent use.
type Store struct {
	name      string
	client    *s3.Client
	bucket    string
	prefix    string // "" or "p/q/" (with trailing slash)
	singlePut int64
	partSize  int64

	// tmpl is where single presigned PUTs are sent without the SDK's
	// operation stack (directput.go); nil: through the SDK.
	tmpl *putTemplate

	mu   sync.RWMutex
	caps Capabilities
}

var _ fencegate.ObjectStore = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithSinglePutLimit sets the largest object written with one PutObject.
func WithSinglePutLimit(n int64) Option { return func(s *Store) { s.singlePut = n } }

// WithPartSize sets the multipart part size (at least 5 MiB is enforced).
func WithPartSize(n int64) Option { return func(s *Store) { s.partSize = max(n, minPartSize) } }

// WithCapabilities declares the store's capabilities without probing. The
// default assumes all of them until Probe finds otherwise.
func WithCapabilities(c Capabilities) Option { return func(s *Store) { s.caps = c } }

// New returns a store named name over bucket/prefix using client.
func New(name string, client *s3.Client, bucket, prefix string, opts ...Option) *Store {
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		prefix += "/"
	}
	s := &Store{name: name, client: client, bucket: bucket, prefix: prefix,
		singlePut: DefaultSinglePutLimit, partSize: DefaultPartSize,
		caps: Capabilities{ConditionalDelete: true, ConditionalMultipart: true}}
	for _, o := range opts {
		o(s)
	}
	s.tmpl = putTemplateOf(client, bucket)
	return s
}

// URL is a parsed store URL: s3://BUCKET[/PREFIX]?endpoint=URL&region=R&pathStyle=true.
type URL struct {
	Bucket    string
	Prefix    string
	Endpoint  string
	Region    string
	PathStyle bool
}

// ParseURL parses a store URL and rejects unknown parameters.
func ParseURL(rawURL string) (URL, error) {
	bad := func(format string, args ...any) (URL, error) {
		return URL{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "s3 store URL: "+format, args...)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return bad("%v", err)
	}
	if u.Scheme != "s3" || u.Host == "" || u.User != nil || u.Fragment != "" {
		return bad("want s3://BUCKET[/PREFIX]?endpoint=URL&region=R&pathStyle=true")
	}
	out := URL{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	if out.Prefix != "" {
		if err := fencegate.CheckName(out.Prefix); err != nil {
			return bad("prefix: %v", err)
		}
	}
	for k, v := range u.Query() {
		if len(v) != 1 {
			return bad("parameter %q given %d times", k, len(v))
		}
		switch k {
		case "endpoint":
			ep, err := url.Parse(v[0])
			if err != nil || (ep.Scheme != "http" && ep.Scheme != "https") || ep.Host == "" {
				return bad("endpoint %q is not an http(s) URL", v[0])
			}
			out.Endpoint = v[0]
		case "region":
			out.Region = v[0]
		case "pathStyle":
			if out.PathStyle, err = strconv.ParseBool(v[0]); err != nil {
				return bad("pathStyle %q is not a boolean", v[0])
			}
		default:
			return bad("unknown parameter %q", k)
		}
	}
	return out, nil
}

// Open returns a store for rawURL (see URL). Credentials come from the SDK's
// default chain (environment, shared config, instance roles); the region
// defaults to us-east-1 when neither the URL nor the environment names one.
func Open(ctx context.Context, name string, rawURL string, opts ...Option) (*Store, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return OpenURL(ctx, name, u, opts...)
}

// OpenURL is Open for a URL ParseURL has accepted (the gateway's config
// validates store URLs once, up front, and opens them with this).
func OpenURL(ctx context.Context, name string, u URL, opts ...Option) (*Store, error) {
	var lo []func(*config.LoadOptions) error
	if u.Region != "" {
		lo = append(lo, config.WithRegion(u.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("store %q: load AWS configuration", name))
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	cfg.HTTPClient = pooled(cfg.HTTPClient)
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if u.Endpoint != "" {
			o.BaseEndpoint = aws.String(u.Endpoint)
		}
		o.UsePathStyle = u.PathStyle
	})
	return New(name, client, u.Bucket, u.Prefix, opts...), nil
}

// idleConnsPerHost is how many idle connections to the store are kept. The
// SDK's default keeps 10, so beyond 10 writes in flight every write that
// finds none idle opens a connection (and closes one after it): the gateway
// forwards as many concurrent writes as it admits.
const idleConnsPerHost = 256

// pooled is hc (the SDK's default client when nil) keeping idleConnsPerHost
// idle connections, whose connections are reset when closed (resetOnClose);
// a client of the caller's own kind is left as it is.
func pooled(hc aws.HTTPClient) aws.HTTPClient {
	b, ok := hc.(*awshttp.BuildableClient)
	if hc == nil {
		b, ok = awshttp.NewBuildableClient(), true
	}
	if !ok {
		return hc
	}
	return b.WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConnsPerHost = idleConnsPerHost
		t.MaxIdleConns = max(t.MaxIdleConns, idleConnsPerHost)
	}).WithDialerOptions(resetOnClose)
}

// Name returns the store's configured name.
func (s *Store) Name() string { return s.name }

// Capabilities returns the capabilities in force (as declared or probed).
func (s *Store) Capabilities() Capabilities {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.caps
}

func (s *Store) full(key string) *string { return aws.String(s.prefix + key) }

// Put writes the object if its condition holds and returns the new ETag.
// Objects larger than the single-PUT limit go through a multipart upload whose
// completion carries the condition.
func (s *Store) Put(ctx context.Context, req fencegate.PutRequest) (string, error) {
	if err := req.Validate(); err != nil {
		return "", err
	}
	body := req.Body
	if body == nil {
		body = bytes.NewReader(nil)
	}
	start, err := body.Seek(0, io.SeekCurrent)
	if err != nil {
		return "", fencegate.Wrap(err, fencegate.CodeInvalidRequest, "put: body is not seekable")
	}
	if err := s.checkLandBy(ctx, "put", req.Key); err != nil {
		return "", err
	}
	if req.Size > s.singlePut {
		return s.putMultipart(ctx, req, body, start)
	}
	var etag string
	var sent attemptCounter
	until, direct := fencegate.LandBy(ctx)
	p := putObject{key: s.prefix + req.Key, body: body, start: start, size: req.Size,
		contentType: req.ContentType, meta: encodeMeta(req.Metadata()), ifNoneMatch: req.IfNoneMatch, ifMatch: req.IfMatch}
	var in *s3.PutObjectInput // the SDK's input; nil for a direct PUT
	if !direct || s.tmpl == nil {
		in = &s3.PutObjectInput{Bucket: &s.bucket, Key: &p.key, Body: body, ContentLength: &p.size, Metadata: p.meta}
		if req.ContentType != "" {
			in.ContentType = &p.contentType
		}
		if req.IfNoneMatch {
			in.IfNoneMatch = aws.String("*")
		} else {
			in.IfMatch = &p.ifMatch
		}
	}
	err = retryConflict(ctx, func() error {
		var err error
		if in == nil {
			etag, err = s.putDirect(ctx, s.tmpl, p, until, time.Time{}, &sent)
			return err
		}
		if _, err := body.Seek(start, io.SeekStart); err != nil {
			return err
		}
		out, err := s.client.PutObject(ctx, in, append(landByOptions(ctx), sent.option())...)
		if err == nil {
			etag = aws.ToString(out.ETag)
		}
		return err
	})
	if err != nil {
		if req.IfMatch != "" && missingKey(err) {
			return "", s.precondition(err, "put", req.Key)
		}
		if refusedOnce(err, sent.n.Load()) {
			err = notApplied(err)
		}
		return "", s.translate(err, "put", req.Key, true)
	}
	return etag, nil
}

// Delete removes the object if its ETag equals ifMatch. UNSUPPORTED when the
// store does not honour conditional deletes.
func (s *Store) Delete(ctx context.Context, key, ifMatch string) error {
	if err := fencegate.CheckName(key); err != nil {
		return err
	}
	if ifMatch == "" {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "delete of %q needs If-Match", key)
	}
	if !s.Capabilities().ConditionalDelete {
		return fencegate.Errorf(fencegate.CodeUnsupported, "store %q does not support conditional delete", s.name)
	}
	if err := s.checkLandBy(ctx, "delete", key); err != nil {
		return err
	}
	var sent attemptCounter
	err := retryConflict(ctx, func() error {
		_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: s.full(key), IfMatch: aws.String(ifMatch)},
			append(landByOptions(ctx), sent.option())...)
		return err
	})
	if err != nil {
		if missingKey(err) { // If-Match on a missing key: the condition did not hold
			return s.precondition(err, "delete", key)
		}
		if refusedOnce(err, sent.n.Load()) {
			err = notApplied(err)
		}
		return s.translate(err, "delete", key, true)
	}
	return nil
}

// Get opens the object; the caller closes the reader.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, fencegate.ObjectInfo, error) {
	if err := fencegate.CheckName(key); err != nil {
		return nil, fencegate.ObjectInfo{}, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: s.full(key)})
	if err != nil {
		return nil, fencegate.ObjectInfo{}, s.translate(err, "get", key, false)
	}
	return out.Body, fencegate.ObjectInfo{Key: key, ETag: aws.ToString(out.ETag), Size: aws.ToInt64(out.ContentLength),
		ContentType: aws.ToString(out.ContentType), Metadata: decodeMeta(out.Metadata), LastModified: aws.ToTime(out.LastModified)}, nil
}

// Head describes the object.
func (s *Store) Head(ctx context.Context, key string) (fencegate.ObjectInfo, error) {
	if err := fencegate.CheckName(key); err != nil {
		return fencegate.ObjectInfo{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: s.full(key)})
	if err != nil {
		return fencegate.ObjectInfo{}, s.translate(err, "head", key, false)
	}
	return fencegate.ObjectInfo{Key: key, ETag: aws.ToString(out.ETag), Size: aws.ToInt64(out.ContentLength),
		ContentType: aws.ToString(out.ContentType), Metadata: decodeMeta(out.Metadata), LastModified: aws.ToTime(out.LastModified)}, nil
}

// firstConflictDelay is the backoff before the first retry after a 409
// ConditionalRequestConflict; it doubles with each retry.
const firstConflictDelay = 20 * time.Millisecond

// retryConflict runs op, retrying with jittered backoff while the store answers
// 409 ConditionalRequestConflict (a concurrent conditional write in flight).
func retryConflict(ctx context.Context, op func() error) error {
	delay := firstConflictDelay
	for i := 0; ; i++ {
		err := op()
		if err == nil || !isConflict(err) || i == conflictRetries || !backoff(ctx, &delay) {
			return err
		}
	}
}

// backoff waits *delay plus up to as much again (jitter) and doubles
// *delay; false when ctx ended first.
func backoff(ctx context.Context, delay *time.Duration) bool {
	t := time.NewTimer(*delay + rand.N(*delay))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	*delay *= 2
	return true
}
