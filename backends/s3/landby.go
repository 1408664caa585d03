package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/fencegate/fencegate"
)

// A write whose context carries a landing deadline (fencegate.LandBy) is
// sent as a presigned request (SigV4 query authentication) whose
// X-Amz-Date + X-Amz-Expires is less than a second after that deadline
// (fencegate.LandBySlack: both are whole seconds), so that S3
// itself refuses it when it arrives later (held in a buffer, a proxy, a
// paused server):
//
//   - "X-Amz-Expires: the time period, in seconds, for which the generated
//     presigned URL is valid ... minimum 1, maximum 604800"
//     (https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html);
//   - S3 checks the expiration at the time of the HTTP request: a transfer
//     that started before it continues, a request that starts after it fails
//     (https://docs.aws.amazon.com/AmazonS3/latest/userguide/using-presigned-url.html,
//     "Presigned URL expiration"). versitygw v1.8.0 does the same: its
//     VerifyPresignedV4Signature middleware checks X-Amz-Date + X-Amz-Expires
//     against its clock when the headers arrive (s3api/utils/presign-auth-reader.go),
//     and streams the body afterwards.
//
// So the deadline bounds when a request can start at the store, not when its
// body ends: a request whose headers arrived in time and whose body a
// store-and-forward middlebox holds can still be applied later, bounded only
// by the store's own read timeout (AWS answers RequestTimeout to an idle
// socket; versitygw v1.8.0 sets none). The reconciler's grace
// (reconcile.orphan, gateway.ObjectResolver) covers that time and the clock
// skew between gateway and store. The gateway's own connection is cancelled
// at the write's expiry (gateway.forward), and reset rather than closed in
// order (linger.go), which ends a body still passing through it: the bytes
// its kernel had buffered are discarded, not delivered late.
//
// Presigned uploads do not support the flexible checksums (CRC32, CRC32C,
// SHA-1, SHA-256; same page), so such writes are sent without them. The
// payload is UNSIGNED-PAYLOAD, as for every presigned request.

// errLandByPassed: the landing deadline passed before the request was sent.
var errLandByPassed = errors.New("the write's landing deadline passed before it was sent; not sent")

// maxPresignExpires is S3's largest X-Amz-Expires (seven days).
const maxPresignExpires = 604800

// presignExpires is the X-Amz-Expires of a request signed at now: X-Amz-Date
// has whole seconds, so the request expires less than a second after until
// (fencegate.LandBySlack). ok is false when until has passed: the request is
// not sent.
func presignExpires(now, until time.Time) (secs int64, ok bool) {
	if !now.Before(until) {
		return 0, false
	}
	d := until.Sub(now.UTC().Truncate(time.Second))
	secs = int64((d + time.Second - 1) / time.Second)
	return min(secs, maxPresignExpires), true
}

// presignWrite re-signs a request the SDK has just signed (Authorization
// header) as a presigned request valid until until, with the same
// credentials, region and service. It runs after the SDK's Signing step, so
// every attempt the SDK's retryer makes is presigned afresh. The direct PUT
// (putDirect) uses its presignScoped alone, on a request the SDK never
// signed, with the scope taken from the put template.
type presignWrite struct {
	until  time.Time
	creds  aws.CredentialsProvider
	signer *v4.Signer
	// at is the signing time; zero: the time of each attempt (only the
	// probe signs in the past, see probeExpiry).
	at time.Time
}

func (presignWrite) ID() string { return "fencegate.PresignUntilLandBy" }

func (m presignWrite) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
	req, ok := in.Request.(*smithyhttp.Request)
	if !ok {
		return middleware.FinalizeOutput{}, middleware.Metadata{}, fmt.Errorf("presign: unexpected request type %T", in.Request)
	}
	now := m.at
	if now.IsZero() {
		now = time.Now()
	}
	if err := m.presign(ctx, req.Request, now); err != nil {
		return middleware.FinalizeOutput{}, middleware.Metadata{}, err
	}
	return next.HandleFinalize(ctx, in)
}

func (m presignWrite) presign(ctx context.Context, r *http.Request, now time.Time) error {
	if _, ok := presignExpires(now, m.until); !ok {
		return errLandByPassed
	}
	// The scope the SDK signed for: Credential=AK/DATE/REGION/SERVICE/aws4_request.
	_, cred, _ := strings.Cut(r.Header.Get("Authorization"), "Credential=")
	cred, _, _ = strings.Cut(cred, ",")
	scope := strings.Split(cred, "/")
	if len(scope) != 5 {
		return fmt.Errorf("presign: the SDK signed no SigV4 scope (Authorization %q)", r.Header.Get("Authorization"))
	}
	return m.presignScoped(ctx, r, now, scope[2], scope[3])
}

// presignScoped presigns r for region and service (the SigV4 scope), signed
// at now and expiring as presignExpires says; errLandByPassed when until has
// passed (r is then not to be sent).
func (m presignWrite) presignScoped(ctx context.Context, r *http.Request, now time.Time, region, service string) error {
	secs, ok := presignExpires(now, m.until)
	if !ok {
		return errLandByPassed
	}
	if m.creds == nil {
		return errors.New("presign: the client has no credentials")
	}
	creds, err := m.creds.Retrieve(ctx)
	if err != nil {
		return err
	}
	for _, h := range []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token"} {
		r.Header.Del(h)
	}
	if v := r.Header[hdrContentSHA256]; len(v) != 1 || v[0] != unsignedPayload {
		r.Header.Set(hdrContentSHA256, unsignedPayload)
	}
	if r.URL.RawQuery == "" { // a direct PUT: nothing to keep
		r.URL.RawQuery = "X-Amz-Expires=" + strconv.FormatInt(secs, 10)
	} else { // the SDK's x-id, or an earlier attempt's signature
		q := r.URL.Query()
		for k := range q {
			if strings.HasPrefix(strings.ToLower(k), "x-amz-") {
				q.Del(k) // an earlier attempt's signature
			}
		}
		q.Set("X-Amz-Expires", strconv.FormatInt(secs, 10))
		r.URL.RawQuery = q.Encode()
	}
	// Every header stays a header, signed as it is: the metadata and the
	// If-Match / If-None-Match condition are part of the signature.
	uri, _, err := m.signer.PresignHTTP(ctx, creds, r, unsignedPayload, service, region, now, func(o *v4.SignerOptions) {
		o.DisableHeaderHoisting, o.DisableURIPathEscaping = true, true
	})
	if err != nil {
		return err
	}
	// The signer returns r's URL with the signed query: the path and host are
	// r's own (it changes neither; the escaped path holds no '?').
	_, query, ok := strings.Cut(uri, "?")
	if !ok {
		return fmt.Errorf("presign: the signer returned no query (%q)", uri)
	}
	r.URL.RawQuery = query
	return nil
}

// landByOptions are the per-operation options of a write sent under ctx:
// presigned until its landing deadline, when it has one.
func landByOptions(ctx context.Context) []func(*s3.Options) {
	until, ok := fencegate.LandBy(ctx)
	if !ok {
		return nil
	}
	return presignOptions(until, time.Time{})
}

// presigner signs every presigned write. One Signer for all of them keeps
// its cache of derived signing keys (one per credentials, day, region and
// service: aws/signer/internal/v4 derivedKeyCache, guarded by its own mutex,
// as the SDK's clients share one Signer between goroutines); a Signer per
// request derived the key again, four HMACs, on every write.
var presigner = v4.NewSigner()

// attemptCounter counts the HTTP requests sent (each SDK attempt) by the
// operations it is added to (option), and each attempt of a direct PUT
// (putDirect counts it itself, as the SDK path does, before signing).
type attemptCounter struct{ n atomic.Int32 }

func (c *attemptCounter) option() func(*s3.Options) {
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Finalize.Insert(middleware.FinalizeMiddlewareFunc("fencegate.CountAttempts",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					c.n.Add(1)
					return next.HandleFinalize(ctx, in)
				}), "Retry", middleware.After)
		})
	}
}

// presignOptions presign every attempt until until, signed at at (zero: at
// each attempt's time).
func presignOptions(until, at time.Time) []func(*s3.Options) {
	return []func(*s3.Options){func(o *s3.Options) {
		mw := presignWrite{until: until, at: at, creds: o.Credentials, signer: presigner}
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			// The presigned request's payload is UNSIGNED-PAYLOAD, so the
			// SDK's SHA-256 of the body for its own header signature (over
			// plain HTTP it reads the whole body once more before sending:
			// aws/signer/v4 dynamicPayloadSigningMiddleware) is not computed.
			if _, ok := st.Finalize.Get("ComputePayloadHash"); ok {
				if err := v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware(st); err != nil {
					return err
				}
			}
			return st.Finalize.Insert(mw, "Signing", middleware.After)
		})
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
	}}
}

// checkLandBy refuses, before anything is sent, a write whose landing
// deadline has passed (it could not be signed to arrive in time): certainly
// not applied (fencegate.ErrNotApplied). The same deadline met by an SDK
// retry (presignWrite) is not: an earlier attempt may have been applied.
func (s *Store) checkLandBy(ctx context.Context, op, key string) error {
	if until, ok := fencegate.LandBy(ctx); ok {
		if _, ok := presignExpires(time.Now(), until); !ok {
			return fencegate.Wrap(notApplied(errLandByPassed), fencegate.CodeBackendUnavailable,
				"store "+strconv.Quote(s.name)+": "+op+" "+strconv.Quote(key))
		}
	}
	return nil
}
