package s3door

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	authcreds "github.com/aws/smithy-go/aws-http-auth/credentials"
	"github.com/aws/smithy-go/aws-http-auth/sigv4"
	authv4 "github.com/aws/smithy-go/aws-http-auth/v4"

	"github.com/fencegate/fencegate"
)

// Signature Version 4 verification. The gateway does not canonicalise
// requests itself: it rebuilds the received request from the headers the
// client says it signed and has smithy-go's SigV4 signer (aws-http-auth
// sigv4.SignRequest, header or query form) sign it with the credential's
// secret over exactly that list of headers; the signatures and the lists are
// then compared, the signatures in constant time.
//
// A client may sign any header it sends, and S3 verifies exactly the list it
// names: s3cmd signs content-length on every PUT (content-length:0 for an
// empty file), other clients sign user-agent. A client-side signer's own
// choice of headers (aws-sdk-go-v2's v4 signer never signs a zero
// content-length, nor User-Agent, Expect, X-Amzn-Trace-Id, ...) cannot verify
// those, so it is not used for that.
//
// One exception: smithy-go's signer can put only a SHA-256 or
// UNSIGNED-PAYLOAD in the canonical request, not the STREAMING-* literals of
// aws-chunked bodies, so a request whose x-amz-content-sha256 is one of
// those (or not lower-case hex) is still signed with aws-sdk-go-v2's signer
// (SignHTTP, PresignHTTP), with that signer's header rules. aws-chunked
// bodies are never empty, so a signed content-length is always signed there.
// References:
// https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html
// https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html

const (
	algorithm = "AWS4-HMAC-SHA256"
	service   = "s3"
	amzDate   = "20060102T150405Z"
	// maxSkew is how far X-Amz-Date may be from the gateway's clock, as S3
	// allows (RequestTimeTooSkewed beyond it).
	maxSkew = 15 * time.Minute
	// maxPresignExpiry is S3's limit for X-Amz-Expires (7 days).
	maxPresignExpiry = 7 * 24 * time.Hour

	unsignedPayload          = "UNSIGNED-PAYLOAD"
	streamingSigned          = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	streamingSignedTrailer   = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
	streamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
)

// verifier is smithy-go's SigV4 signer as S3 uses it: the URI path is not
// escaped a second time, and the payload hash is always the one given (the
// rebuilt request has no body). Each use names the headers to sign
// (signedExactly).
var verifier = sigv4.New(func(o *authv4.SignerOptions) {
	o.DisableDoublePathEscape = true
	o.DisableImplicitPayloadHashing = true
})

// signer is the SDK's signer as S3 uses it, for STREAMING-* payload hashes
// only (see above): the URI path is not escaped a second time, and headers
// are not hoisted into a presigned query.
var signer = v4.NewSigner(func(o *v4.SignerOptions) {
	o.DisableURIPathEscaping = true
	o.DisableHeaderHoisting = true
})

// signedExactly is the header rule of one verification: the headers the
// client lists in SignedHeaders (lower-case), and no other, are signed.
type signedExactly map[string]bool

func (s signedExactly) IsSigned(lowercaseName string) bool { return s[lowercaseName] }

func headerRule(signedHeaders []string) authv4.SignerOption {
	set := make(signedExactly, len(signedHeaders))
	for _, h := range signedHeaders {
		set[h] = true
	}
	return func(o *authv4.SignerOptions) { o.HeaderRules = set }
}

// payloadHashBytes is an x-amz-content-sha256 as smithy-go's signer takes
// it: the SHA-256's bytes (which it writes back as lower-case hex) or the
// UNSIGNED-PAYLOAD literal. ok is false for anything it cannot write back
// as received: the STREAMING-* literals, upper-case hex.
func payloadHashBytes(v string) (b []byte, ok bool) {
	if v == unsignedPayload {
		return []byte(unsignedPayload), true
	}
	b, err := hex.DecodeString(v)
	if err != nil || len(b) != 32 || hex.EncodeToString(b) != v {
		return nil, false
	}
	return b, true
}

func signingCredentials(c aws.Credentials) authcreds.Credentials {
	return authcreds.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken}
}

// expectedHeaderSignature signs req (rebuilt by rebuild) in the header form
// over exactly signedHeaders and returns the signature and header list of
// the Authorization header that results.
func expectedHeaderSignature(ctx context.Context, req *http.Request, signedHeaders []string, creds aws.Credentials, payload, region string, when time.Time) (sigParts, error) {
	if hash, ok := payloadHashBytes(payload); ok {
		if err := verifier.SignRequest(&sigv4.SignRequestInput{Request: req, PayloadHash: hash,
			Credentials: signingCredentials(creds), Service: service, Region: region, Time: when}, headerRule(signedHeaders)); err != nil {
			return sigParts{}, fencegate.Wrap(err, fencegate.CodeInternal, "signing failed")
		}
	} else if err := signer.SignHTTP(ctx, creds, req, payload, service, region, when); err != nil {
		return sigParts{}, fencegate.Wrap(err, fencegate.CodeInternal, "signing failed")
	}
	got, err := parseAuthorization(req.Header.Get("Authorization"))
	if err != nil {
		return sigParts{}, signatureMismatch()
	}
	return got, nil
}

// expectedQuerySignature signs req (rebuilt by rebuild, its query the
// presigned URL's without X-Amz-Signature) in the query form over exactly
// signedHeaders and returns the X-Amz-Signature and X-Amz-SignedHeaders
// that result.
func expectedQuerySignature(ctx context.Context, req *http.Request, signedHeaders []string, creds aws.Credentials, payload, region string, when time.Time) (signature string, signed []string, err error) {
	var sq url.Values
	if hash, ok := payloadHashBytes(payload); ok {
		if err := verifier.SignRequest(&sigv4.SignRequestInput{Request: req, PayloadHash: hash,
			Credentials: signingCredentials(creds), Service: service, Region: region, Time: when,
			SignatureType: authv4.SignatureTypeQueryString}, headerRule(signedHeaders)); err != nil {
			return "", nil, fencegate.Wrap(err, fencegate.CodeInternal, "signing failed")
		}
		sq = req.URL.Query()
	} else {
		u, _, err := signer.PresignHTTP(ctx, creds, req, payload, service, region, when)
		if err != nil {
			return "", nil, fencegate.Wrap(err, fencegate.CodeInternal, "signing failed")
		}
		pu, err := url.Parse(u)
		if err != nil {
			return "", nil, signatureMismatch()
		}
		sq = pu.Query()
	}
	return sq.Get("X-Amz-Signature"), strings.Split(sq.Get("X-Amz-SignedHeaders"), ";"), nil
}

// authed is a request whose signature verified.
type authed struct {
	cred fencegate.S3Credential
	// payloadHash is the signed x-amz-content-sha256 (for a presigned URL
	// its header if sent, else the query's, else UNSIGNED-PAYLOAD:
	// presignedPayload): a hex SHA-256 the body must match, or a literal.
	payloadHash string
	// For aws-chunked signed chunks: the seed signature, time and region.
	seed   []byte
	when   time.Time
	region string
	creds  aws.Credentials
}

// sigParts is what an Authorization header or a presigned query names.
type sigParts struct {
	akid, date, region, service string
	signedHeaders               []string
	signature                   string
}

func parseCredential(s string) (sigParts, error) {
	f := strings.Split(s, "/")
	if len(f) != 5 || f[4] != "aws4_request" || f[0] == "" {
		return sigParts{}, s3err(http.StatusBadRequest, "AuthorizationHeaderMalformed", "the Credential is not AKID/date/region/s3/aws4_request")
	}
	if f[3] != service {
		return sigParts{}, s3err(http.StatusBadRequest, "AuthorizationHeaderMalformed", "the credential's service must be s3")
	}
	return sigParts{akid: f[0], date: f[1], region: f[2], service: f[3]}, nil
}

func parseAuthorization(h string) (sigParts, error) {
	rest, ok := strings.CutPrefix(h, algorithm+" ")
	if !ok {
		return sigParts{}, s3err(http.StatusBadRequest, "AuthorizationHeaderMalformed", "only AWS4-HMAC-SHA256 signatures are accepted")
	}
	var p sigParts
	var cred, sh string
	for _, kv := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			sh = v
		case "Signature":
			p.signature = v
		}
	}
	if cred == "" || sh == "" || p.signature == "" {
		return sigParts{}, s3err(http.StatusBadRequest, "AuthorizationHeaderMalformed", "the Authorization header lacks Credential, SignedHeaders or Signature")
	}
	c, err := parseCredential(cred)
	if err != nil {
		return sigParts{}, err
	}
	c.signature, c.signedHeaders = p.signature, strings.Split(sh, ";")
	return c, nil
}

// verify authenticates r: header-signed or presigned. It returns the
// credential only when the signature matches.
//
// A request carries one credential: more than one Authorization line
// (not a list field, RFC 9110 section 11.6.2: a proxy reading the last line
// would see another credential than the one verified here) is
// AuthorizationHeaderMalformed, counted as UNAUTHENTICATED as the REST API
// answers two lines; an Authorization header beside a presigned query is
// InvalidArgument, S3's own answer ("Only one auth mechanism allowed; only
// the X-Amz-Algorithm query parameter, Signature query string parameter or
// the Authorization header should be specified").
func (s *Server) verify(r *http.Request) (*authed, error) {
	q := r.URL.Query()
	auths := r.Header.Values("Authorization")
	if len(auths) > 1 {
		return nil, s3err(http.StatusBadRequest, "AuthorizationHeaderMalformed", fmt.Sprintf("the request has %d Authorization header lines; send one credential", len(auths)))
	}
	if q.Get("X-Amz-Algorithm") != "" || q.Get("X-Amz-Signature") != "" {
		if len(auths) == 1 {
			return nil, s3err(http.StatusBadRequest, "InvalidArgument", "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature query string parameter or the Authorization header should be specified")
		}
		return s.verifyPresigned(r, q)
	}
	var h string
	if len(auths) == 1 {
		h = auths[0]
	}
	if h == "" {
		return nil, s3err(http.StatusForbidden, "AccessDenied", "the request is not signed (anonymous access is not allowed)")
	}
	p, err := parseAuthorization(h)
	if err != nil {
		return nil, err
	}
	when, err := time.Parse(amzDate, headerValue(r.Header, "X-Amz-Date"))
	if err != nil {
		return nil, s3err(http.StatusForbidden, "AccessDenied", "X-Amz-Date is missing or malformed (the Date header is not supported)")
	}
	if err := s.checkTime(when, p); err != nil {
		return nil, err
	}
	payload, err := contentSHA256(r)
	if err != nil {
		return nil, err
	}
	if err := allAmzHeadersSigned(r, p.signedHeaders); err != nil {
		return nil, err
	}
	a, err := s.credential(r, p)
	if err != nil {
		return nil, err
	}
	req, err := rebuild(r, p.signedHeaders, r.URL.RawQuery)
	if err != nil {
		return nil, err
	}
	got, err := expectedHeaderSignature(r.Context(), req, p.signedHeaders, a.creds, payload, p.region, when)
	if err != nil {
		return nil, err
	}
	if !sameHeaders(got.signedHeaders, p.signedHeaders) || !equalHex(got.signature, p.signature) {
		return nil, signatureMismatch()
	}
	a.payloadHash, a.when, a.region = payload, when, p.region
	if a.seed, err = hex.DecodeString(p.signature); err != nil {
		return nil, signatureMismatch()
	}
	return a, nil
}

func (s *Server) verifyPresigned(r *http.Request, q url.Values) (*authed, error) {
	if q.Get("X-Amz-Algorithm") != algorithm {
		return nil, s3err(http.StatusBadRequest, "AuthorizationQueryParametersError", "X-Amz-Algorithm must be AWS4-HMAC-SHA256")
	}
	p, err := parseCredential(q.Get("X-Amz-Credential"))
	if err != nil {
		return nil, err
	}
	p.signature, p.signedHeaders = q.Get("X-Amz-Signature"), strings.Split(q.Get("X-Amz-SignedHeaders"), ";")
	when, err := time.Parse(amzDate, q.Get("X-Amz-Date"))
	if err != nil || p.signature == "" {
		return nil, s3err(http.StatusBadRequest, "AuthorizationQueryParametersError", "X-Amz-Date or X-Amz-Signature is missing or malformed")
	}
	secs, err := strconv.ParseInt(q.Get("X-Amz-Expires"), 10, 64)
	if err != nil || secs < 1 || time.Duration(secs)*time.Second > maxPresignExpiry {
		return nil, s3err(http.StatusBadRequest, "AuthorizationQueryParametersError", "X-Amz-Expires must be between 1 and 604800 seconds")
	}
	now := s.Now()
	if now.After(when.Add(time.Duration(secs) * time.Second)) {
		return nil, s3err(http.StatusForbidden, "AccessDenied", "Request has expired")
	}
	if when.After(now.Add(maxSkew)) || q.Get("X-Amz-Date")[:8] != p.date {
		return nil, s3err(http.StatusForbidden, "AccessDenied", "X-Amz-Date is in the future or does not match the credential's date")
	}
	signedPayload, payload, err := presignedPayload(r, q)
	if err != nil {
		return nil, err
	}
	if err := allAmzHeadersSigned(r, p.signedHeaders); err != nil {
		return nil, err
	}
	a, err := s.credential(r, p)
	if err != nil {
		return nil, err
	}
	q.Del("X-Amz-Signature")
	req, err := rebuild(r, p.signedHeaders, q.Encode())
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(payload, "STREAMING-") {
		// A signed chunk chain starts from the request's own signature (its
		// seed), which a presigned URL's holder does not send for its body:
		// its chunks would be bound to no request. An unsigned one's
		// x-amz-trailer would travel in the query, where the front door
		// reads no x-amz-* header (queryAllowed): refused too. S3 documents
		// streaming uploads for the Authorization header only ("Signature
		// Calculations for the Authorization Header: Transferring Payload
		// in Multiple Chunks").
		return nil, notImplemented(payload + " with a presigned URL")
	}
	sig, signed, err := expectedQuerySignature(r.Context(), req, p.signedHeaders, a.creds, signedPayload, p.region, when)
	if err != nil {
		return nil, err
	}
	if !sameHeaders(signed, p.signedHeaders) || !equalHex(sig, p.signature) {
		return nil, signatureMismatch()
	}
	a.payloadHash, a.when, a.region = payload, when, p.region
	return a, nil
}

// allAmzHeadersSigned refuses a request carrying an x-amz-* header its
// signature does not cover, as S3 does ("There were headers present in the
// request which were not signed"): such a header (x-amz-meta-fence-segment,
// user metadata, a checksum, x-amz-decoded-content-length, ...) could
// otherwise be added or changed by anyone relaying a signed request or
// holding a presigned URL. x-amz-content-sha256 is exempt: it is in every
// header-signed canonical request whether listed or not, and on a
// presigned request it is read (presignedPayload) and can only add a check.
func allAmzHeadersSigned(r *http.Request, signed []string) error {
	set := make(map[string]bool, len(signed))
	for _, h := range signed {
		set[h] = true
	}
	var missing []string
	for k := range r.Header {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-amz-") && lk != "x-amz-content-sha256" && !set[lk] {
			missing = append(missing, lk)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return s3err(http.StatusForbidden, "AccessDenied", "There were headers present in the request which were not signed: "+strings.Join(missing, ", "))
	}
	return nil
}

// checkTime refuses a signing time too far from the gateway's clock or of
// another day than the credential scope.
func (s *Server) checkTime(when time.Time, p sigParts) error {
	now := s.Now()
	if d := now.Sub(when); d > maxSkew || d < -maxSkew {
		return s3err(http.StatusForbidden, "RequestTimeTooSkewed", "the difference between the request time and the server's time is too large")
	}
	if when.UTC().Format("20060102") != p.date {
		return s3err(http.StatusBadRequest, "AuthorizationHeaderMalformed", "Invalid credential date. Date is not the same as X-Amz-Date.")
	}
	return nil
}

// credential looks the access key up and checks the session token and the
// credential's expiry. Nothing of the credential is used unless the
// signature later matches.
func (s *Server) credential(r *http.Request, p sigParts) (*authed, error) {
	c, err := s.Credentials.LookupS3(r.Context(), p.akid)
	if err != nil {
		if fencegate.ErrorCode(err) == fencegate.CodeNotFound {
			return nil, s3err(http.StatusForbidden, "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.")
		}
		return nil, err
	}
	tok := headerValue(r.Header, "X-Amz-Security-Token")
	if tok == "" {
		tok = r.URL.Query().Get("X-Amz-Security-Token")
	}
	if c.SessionToken != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(c.SessionToken)) != 1 {
		return nil, s3err(http.StatusForbidden, "InvalidToken", "The provided token is malformed or otherwise invalid.")
	}
	if !c.ExpiresAt.IsZero() && !s.Now().Before(c.ExpiresAt) {
		return nil, s3err(http.StatusBadRequest, "ExpiredToken", "The provided token has expired.")
	}
	return &authed{cred: c, creds: aws.Credentials{AccessKeyID: p.akid, SecretAccessKey: c.SecretAccessKey, SessionToken: tok}}, nil
}

func equalHex(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(strings.ToLower(a)), []byte(strings.ToLower(b))) == 1
}

func signatureMismatch() error {
	return s3err(http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your key and signing method.")
}

// chunkSigner verifies the chunk signatures of a STREAMING-AWS4-HMAC-SHA256-
// PAYLOAD body with the SDK's stream signer, seeded with the header
// signature (each chunk's string to sign chains on the previous signature).
func (a *authed) chunkSigner() *v4.StreamSigner {
	return v4.NewStreamSigner(a.creds, service, a.region, a.seed)
}

// chunkSignature is the expected signature of the next chunk.
func (a *authed) chunkSignature(ctx context.Context, ss *v4.StreamSigner, chunk []byte) string {
	sig, _ := ss.GetSignature(ctx, nil, chunk, a.when)
	return hex.EncodeToString(sig)
}
