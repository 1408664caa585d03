package s3door

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/spool"
)

// Server is the S3 front door. Its fields are set before Router is called.
type Server struct {
	// Gateway is the acceptance point every write goes through.
	Gateway *gateway.Gateway
	// Stores are the buckets: a bucket is the object store of its name.
	Stores map[string]fencegate.ObjectStore
	// Credentials resolves access key IDs.
	Credentials fencegate.S3Credentials
	// MayRead decides whether an identity may read a resource (nil: every
	// authenticated identity may), as for the REST API's reads.
	MayRead func(identity, resource string) bool
	// SpoolDir holds bodies and multipart parts (default os.TempDir()).
	SpoolDir string
	// Bodies holds the small bodies of object writes in memory within its
	// budget (nil: every body is spooled to SpoolDir). Parts and XML
	// documents are always spooled.
	Bodies *spool.Pool
	// MaxBody caps one body, a part, and a completed multipart object (default 5 GiB).
	MaxBody int64
	// StagingBytes bounds the bytes the staged parts of all open multipart
	// uploads hold together, parts being received included, each part
	// counting at least MinPartCharge (default DefaultStagingBytes; keep it
	// at least twice MaxBody, the largest object and a part of it sent again). A part
	// that would go beyond it is refused before it is read (503 SlowDown,
	// RESOURCE_BUSY); completion, abort and the idle sweep give bytes back.
	StagingBytes int64
	// StagingBytesPerIdentity bounds what one workload identity's uploads
	// (over all its leases) hold of StagingBytes, counted the same way, so
	// that one identity cannot take the budget from the others (default
	// DefaultStagingShare; above StagingBytes it is StagingBytes; keep it at
	// least twice MaxBody). A part that would take its identity beyond it is
	// refused before it is read (503 SlowDown, RESOURCE_BUSY), and the
	// identity's completion, abort and idle sweep give bytes back.
	StagingBytesPerIdentity int64
	// QuarantinePayload bounds the refused payload a quarantine record
	// keeps (see handlers.Server.QuarantinePayload).
	QuarantinePayload int64
	Now               func() time.Time
	Log               *slog.Logger
	// Refused, if set, is told of every error answer: the Fencegate code it
	// stands for (fenceCode), its HTTP status, the caller (the credential's
	// identity; "" before the signature verified) and the log line's
	// attributes. It counts and logs the answer: the gateway wires
	// handlers.Server.Refusal, so S3 answers are in fencegate_refusals_total
	// and the rate-limited refusal log like the REST API's. Nil: the front
	// door logs them itself (refusals at Debug) and counts none.
	Refused func(ctx context.Context, code fencegate.Code, status int, caller string, attrs ...any)

	uploads *uploads
	// statusBudget, if set, stands for statusBudget (ended.go) in tests.
	statusBudget time.Duration
}

// Router returns the front door's handler: path-style addressing
// (/{bucket}/{key}) on a listener of its own.
func Router(s *Server) http.Handler {
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Log == nil {
		s.Log = slog.Default()
	}
	if s.SpoolDir == "" {
		s.SpoolDir = os.TempDir()
	}
	if s.MaxBody <= 0 {
		s.MaxBody = 5 << 30
	}
	if s.StagingBytes <= 0 {
		s.StagingBytes = DefaultStagingBytes
	}
	if s.StagingBytesPerIdentity <= 0 {
		s.StagingBytesPerIdentity = DefaultStagingShare(s.StagingBytes, s.MaxBody)
	}
	s.StagingBytesPerIdentity = min(s.StagingBytesPerIdentity, s.StagingBytes)
	if s.QuarantinePayload == 0 {
		s.QuarantinePayload = fencegate.DefaultQuarantinePayload
	}
	if s.uploads == nil {
		s.uploads = newUploads(s.SpoolDir, s.Now, s.StagingBytes, s.StagingBytesPerIdentity)
	}
	r := chi.NewRouter()
	r.Use(s.recoverer, s.requestID)
	r.Get("/", s.authed(s.dispatch))
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodPost, http.MethodDelete} {
		r.Method(m, "/{bucket}", s.authed(s.dispatch))
		r.Method(m, "/{bucket}/", s.authed(s.dispatch))
		r.Method(m, "/{bucket}/*", s.authed(s.dispatch))
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, notImplemented(r.Method+" "+r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, notImplemented("method "+r.Method))
	})
	return r
}

type authedKey struct{}

// authed verifies the request's signature before anything else runs.
func (s *Server) authed(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a, err := s.verify(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), authedKey{}, a))
		if err := ended(r, a.cred); err != nil {
			s.writeError(w, r, err)
			return
		}
		next(w, r)
	}
}

// ended refuses every request but a write (or a step staging one) signed
// with the credential of a lease that is no longer HELD: writes go on to the
// acceptance point, which refuses them with the precise code (STALE_OWNER).
// An abort of the lease's own upload is served too: it only discards what
// the lease staged.
func ended(r *http.Request, c fencegate.S3Credential) error {
	if !leaseEnded(c) {
		return nil
	}
	if op := operationOf(r); op != nil && (op.Mutates || op.Stages || op.Discards) {
		return nil
	}
	return fencegate.Errorf(fencegate.CodeStatusInvalid, "the credential's lease %s is %s, not HELD", c.Lease, c.State)
}

// dispatch serves a verified request by its entry in Operations.
func (s *Server) dispatch(w http.ResponseWriter, r *http.Request) {
	op := operationOf(r)
	if op == nil {
		s.writeError(w, r, notImplemented(r.Method+" "+levelNames[levelOf(r.URL.Path)]))
		return
	}
	t := &target{}
	if op.Level != LevelService {
		var err error
		if t.bucket, t.st, err = s.bucket(r); err == nil && op.Level == LevelObject {
			t.key, err = objectKey(r, t.bucket)
		}
		if err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	if err := op.serve(s, w, r, t); err != nil {
		s.writeError(w, r, err)
	}
}

var levelNames = map[Level]string{LevelService: "on the service", LevelBucket: "on a bucket", LevelObject: "on an object"}

func authOf(r *http.Request) *authed { return r.Context().Value(authedKey{}).(*authed) }

type requestIDKey struct{}

func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.ToUpper(gateway.NewID("")[:16])
		w.Header().Set("x-amz-request-id", id)
		next.ServeHTTP(w, r)
	})
}

func requestID(w http.ResponseWriter) string { return w.Header().Get("x-amz-request-id") }

func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.writeError(w, r, &fencegate.Error{Code: fencegate.CodeInternal, Message: "internal error", Err: fmt.Errorf("panic: %v", v)})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// bucket resolves the {bucket} of r to its store.
func (s *Server) bucket(r *http.Request) (string, fencegate.ObjectStore, error) {
	name := chi.URLParam(r, "bucket")
	st, ok := s.Stores[name]
	if !ok {
		return "", nil, s3err(http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist (buckets are the gateway's configured stores).")
	}
	return name, st, nil
}

// objectKey is the key of r, refused when the raw path hides a slash or
// backslash or the key fails the canonical name rules.
func objectKey(r *http.Request, bucket string) (string, error) {
	if raw := strings.ToLower(r.URL.RawPath); strings.Contains(raw, "%2f") || strings.Contains(raw, "%5c") {
		return "", fencegate.Errorf(fencegate.CodeInvalidRequest, "encoded slashes are not allowed in object keys")
	}
	key := strings.TrimPrefix(r.URL.Path, "/"+bucket+"/")
	if err := fencegate.CheckName(bucket + "/" + key); err != nil {
		return "", err
	}
	return key, nil
}

func (s *Server) mayRead(identity, resource string) bool {
	return s.MayRead == nil || s.MayRead(identity, resource)
}

// presignParams are the query parameters of a presigned request that the
// front door accepts: SigV4 query authentication's, and the two that
// aws-sdk-go-v2's presigner moves into the query from checksum options
// (X-Amz-Checksum-Mode on a GET or HEAD, which only asks for a checksum in
// the answer; X-Amz-Sdk-Checksum-Algorithm, which names the algorithm of a
// checksum the request carries as a signed header, verified there).
var presignParams = map[string]bool{"X-Amz-Algorithm": true, "X-Amz-Credential": true, "X-Amz-Date": true,
	"X-Amz-Expires": true, "X-Amz-SignedHeaders": true, "X-Amz-Signature": true, "X-Amz-Security-Token": true,
	"X-Amz-Content-Sha256": true, "X-Amz-Checksum-Mode": true, "X-Amz-Sdk-Checksum-Algorithm": true}

// queryAllowed refuses a request carrying a query parameter (an S3
// subresource or option) the operation does not implement, so that nothing
// the client asked for is silently ignored. Presigning parameters and the
// SDKs' x-id are always allowed; any other x-amz-* parameter is refused.
// A parameter given more than once (partNumber=2&partNumber=3, uploadId
// twice, a presigning parameter) is refused as 400 InvalidArgument, the
// code S3 answers a partNumber outside 1..10000 with, rather than read as
// its first value: which part, upload or signature was meant cannot be told.
func queryAllowed(r *http.Request, op string, allowed ...string) error {
	for k, vs := range r.URL.Query() {
		if len(vs) > 1 { // presigning parameters too: each is read as its first
			return s3err(http.StatusBadRequest, "InvalidArgument", op+"'s query parameter "+k+" is given "+strconv.Itoa(len(vs))+" times")
		}
		if presignParams[k] || k == "x-id" {
			continue
		}
		if strings.HasPrefix(strings.ToLower(k), "x-amz-") {
			// A presigner moves the request's x-amz-* headers (metadata,
			// checksums, x-amz-meta-fence-segment, a trailer) into the
			// query; the front door reads them as headers only, so a
			// request carrying one there is refused rather than written
			// without it.
			return notImplemented(op + " with " + k + " in the query string (send it as a signed header)")
		}
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			return notImplemented(op + " with ?" + k)
		}
	}
	return nil
}

// headerValue is the value of hd's header name as one field value: its
// field lines joined with commas, as HTTP combines repeated field lines
// (RFC 9110 §5.3) and as Amazon S3 treats user-defined metadata headers of
// one name ("When metadata is retrieved through the REST API, Amazon S3
// combines headers that have the same name (ignoring case) into a
// comma-delimited list", Working with object metadata,
// https://docs.aws.amazon.com/AmazonS3/latest/userguide/UsingMetadata.html;
// userMeta keeps them so).
// The headers that say what a request writes, how its body is checked or
// what it asks for are read through it, not with Header.Get: a
// single-valued header sent twice (x-amz-meta-fence-segment 28 and 999,
// Content-MD5, x-amz-checksum-*, x-amz-decoded-content-length, x-amz-acl)
// is then the malformed value "28,999" and gets the answer any invalid
// value gets, instead of being read as its first line with the rest
// dropped; a header whose first line is empty is not taken as absent
// (If-None-Match sent as "" and "*"); a list header (If-Match) keeps all
// its members.
func headerValue(hd http.Header, name string) string { return joinValues(hd.Values(name)) }

// joinValues joins one header's field lines as headerValue does.
func joinValues(vs []string) string { return strings.Join(vs, ",") }

// unsupportedHeaders are request headers whose meaning the front door does
// not implement: such a request is NotImplemented, never half-done.
var unsupportedHeaders = []string{
	"X-Amz-Copy-Source", "X-Amz-Server-Side-Encryption", "X-Amz-Server-Side-Encryption-Customer-Algorithm",
	"X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id", "X-Amz-Tagging", "X-Amz-Website-Redirect-Location",
	"X-Amz-Object-Lock-Mode", "X-Amz-Object-Lock-Retain-Until-Date", "X-Amz-Object-Lock-Legal-Hold",
	"X-Amz-Grant-Read", "X-Amz-Grant-Write", "X-Amz-Grant-Full-Control", "X-Amz-Grant-Read-Acp", "X-Amz-Grant-Write-Acp",
	"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since",
}

// unstoredHeaders are standard object headers S3 keeps with an object and
// answers on GET (PutObject: Cache-Control, Content-Disposition,
// Content-Language, Expires); the object stores behind the front door keep
// a content type and user metadata only, so a write setting one is
// NotImplemented rather than a success that drops it.
var unstoredHeaders = []string{"Cache-Control", "Content-Disposition", "Content-Language", "Expires"}

func headersAllowed(r *http.Request) error {
	for _, h := range unsupportedHeaders {
		if headerValue(r.Header, h) != "" {
			return notImplemented("the " + h + " header")
		}
	}
	if v := headerValue(r.Header, "X-Amz-Acl"); v != "" && v != "private" {
		return notImplemented("x-amz-acl " + v)
	}
	if v := headerValue(r.Header, "X-Amz-Storage-Class"); v != "" && v != "STANDARD" {
		return notImplemented("x-amz-storage-class " + v)
	}
	return nil
}

// objectHeadersAllowed is headersAllowed for a request that writes an
// object's bytes (PutObject, CreateMultipartUpload), where an object header
// the stores cannot keep (unstoredHeaders, a content coding) is refused too;
// on a delete such headers say nothing about an object; so is a
// Content-Type the object could not keep.
func objectHeadersAllowed(r *http.Request) error {
	if err := headersAllowed(r); err != nil {
		return err
	}
	for _, h := range unstoredHeaders {
		if headerValue(r.Header, h) != "" {
			return notImplemented("the " + h + " header (the object stores keep no such header)")
		}
	}
	// aws-chunked is the body's transfer encoding, not the object's
	// (S3: "Content-Encoding: aws-chunked" with a STREAMING-* payload); any
	// other coding would have to be kept with the object.
	for _, c := range contentCodings(r) {
		if !strings.EqualFold(c, "aws-chunked") {
			return notImplemented("Content-Encoding " + c + " (the object stores keep no content coding)")
		}
	}
	// A Content-Type the object could not keep, or given twice
	// (fencegate.CheckContentTypeLines), is refused before anything is
	// admitted, as S3's InvalidArgument.
	if err := fencegate.CheckContentTypeLines(r.Header.Values("Content-Type")); err != nil {
		return s3err(http.StatusBadRequest, "InvalidArgument", fencegate.ErrorMessage(err))
	}
	return nil
}
