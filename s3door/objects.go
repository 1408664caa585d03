package s3door

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// emptyDigest is the payload digest of a request without a body.
const emptyDigest = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// SegmentHeader is the user-metadata header through which a client may
// number its own segments (x-amz-meta-fence-segment); without it the
// gateway numbers writes in arrival order.
const SegmentHeader = "X-Amz-Meta-Fence-Segment"

// fenced is the acceptance point's request for a write of key by the
// request's credential, verified (Precheck) before any body is read. The
// segment is the client's x-amz-meta-fence-segment if sent, else assigned
// in arrival order at admission.
func (s *Server) fenced(r *http.Request, bucket, key, method string) (gateway.Request, error) {
	return s.fencedCheck(r, bucket, key, method, false)
}

// staged is fenced for a step that stages a later write (multipart create
// and parts): the grant must also not be superseded already. It returns the
// segment the request numbers (x-amz-meta-fence-segment; 0 for none).
func (s *Server) staged(r *http.Request, bucket, key string) (uint64, error) {
	req, err := s.fencedCheck(r, bucket, key, http.MethodPut, true)
	return req.Segment, err
}

func (s *Server) fencedCheck(r *http.Request, bucket, key, method string, current bool) (gateway.Request, error) {
	a := authOf(r)
	req := gateway.Request{
		Caller: a.cred.Identity, GrantToken: a.cred.Grant, StatusToken: a.cred.Status, Method: method,
		Resource: fencegate.ObjectResource(bucket, key), Target: fencegate.ObjectTarget(bucket, key),
		AssignSegment: true,
	}
	if v := headerValue(r.Header, SegmentHeader); v != "" {
		seg, ok := fencegate.ParseCanonicalUint(v)
		if !ok || seg == 0 {
			return req, fencegate.Errorf(fencegate.CodeInvalidRequest, "x-amz-meta-fence-segment must be an integer >= 1 without sign or leading zero")
		}
		req.Segment, req.AssignSegment = seg, false
	}
	check := s.Gateway.Precheck
	if current {
		check = s.Gateway.Admissible
	}
	err := check(r.Context(), req)
	if err != nil && !s.Gateway.ShadowsRefusal(req.Resource, err) {
		return req, err
	}
	return req, nil
}

func (s *Server) putObject(w http.ResponseWriter, r *http.Request, t *target) error {
	bucket, key, st := t.bucket, t.key, t.st
	if err := queryAllowed(r, "PutObject"); err != nil {
		return err
	}
	if err := objectHeadersAllowed(r); err != nil {
		return err
	}
	req, err := s.fenced(r, bucket, key, http.MethodPut)
	if err != nil {
		return err
	}
	body, alg, sum, err := s.body(r, nil)
	if err != nil {
		return err
	}
	defer body.Close()
	meta, err := userMeta(r.Header)
	if err != nil {
		return err
	}
	req.PayloadDigest = gateway.ObjectPayloadDigest(body.Digest(), headerValue(r.Header, "Content-Type"), meta)
	req.PayloadSize, req.QuarantinePayload = body.Size, body.Keep(s.QuarantinePayload)
	req.Effect = gateway.ObjectPut{Store: st, Key: key, Body: body.Reader(), Size: body.Size, ContentType: headerValue(r.Header, "Content-Type"), UserMeta: meta}
	res, err := s.Gateway.Apply(r.Context(), req)
	if err != nil {
		return err
	}
	if alg != "" {
		w.Header().Set("x-amz-checksum-"+alg, sum)
	}
	answerReceipt(w, res)
	w.WriteHeader(http.StatusOK)
	return nil
}

// answerReceipt sets the headers of an accepted write: the object's ETag,
// the receipt's ID (Fence-Receipt, queryable at /v1/receipts/{id}) and
// whether it was a replay that wrote nothing.
func answerReceipt(w http.ResponseWriter, res gateway.Result) {
	if res.Receipt.Version != "" {
		w.Header().Set("ETag", quoteETag(res.Receipt.Version))
	}
	if res.Receipt.ID != "" {
		w.Header().Set("Fence-Receipt", res.Receipt.ID)
	}
	if res.Replay {
		w.Header().Set("Fence-Replay", "true")
	}
	if res.Verdict != "" {
		w.Header().Set("Fence-Mode", "shadow")
		w.Header().Set("Fence-Verdict", string(res.Verdict))
	}
}

func quoteETag(e string) string {
	if strings.HasPrefix(e, `"`) {
		return e
	}
	return `"` + e + `"`
}

func (s *Server) deleteObject(w http.ResponseWriter, r *http.Request, t *target) error {
	bucket, key, st := t.bucket, t.key, t.st
	if err := queryAllowed(r, "DeleteObject"); err != nil {
		return err
	}
	if err := headersAllowed(r); err != nil {
		return err
	}
	req, err := s.fenced(r, bucket, key, http.MethodDelete)
	if err != nil {
		return err
	}
	req.PayloadDigest = emptyDigest
	req.Effect = gateway.ObjectDelete{Store: st, Key: key}
	res, err := s.Gateway.Apply(r.Context(), req)
	if err != nil {
		return err
	}
	answerReceipt(w, res)
	w.Header().Del("ETag")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) getObject(w http.ResponseWriter, r *http.Request, t *target) error {
	bucket, key, st := t.bucket, t.key, t.st
	if err := queryAllowed(r, "GetObject", "partNumber"); err != nil {
		return err
	}
	if headerValue(r.Header, "X-Amz-Server-Side-Encryption-Customer-Algorithm") != "" {
		return notImplemented("GetObject with customer-provided encryption keys")
	}
	a := authOf(r)
	if !s.mayRead(a.cred.Identity, fencegate.ObjectResource(bucket, key)) {
		return fencegate.Errorf(fencegate.CodeForbidden, "the access policy does not let %q read %q", a.cred.Identity, bucket+"/"+key)
	}
	if pn := r.URL.Query().Get("partNumber"); pn != "" && pn != "1" {
		return s3err(http.StatusRequestedRangeNotSatisfiable, "InvalidPartNumber", "the object is stored as one part")
	}
	var rc io.ReadCloser
	var info fencegate.ObjectInfo
	var err error
	if r.Method == http.MethodHead {
		info, err = st.Head(r.Context(), key)
	} else {
		rc, info, err = st.Get(r.Context(), key)
	}
	if err != nil {
		return err
	}
	if rc != nil {
		defer rc.Close()
	}
	if done, err := preconditions(w, r, info); done || err != nil {
		return err
	}
	h := w.Header()
	ct := info.ContentType
	if ct == "" {
		ct = "binary/octet-stream"
	}
	h.Set("Content-Type", ct)
	// An object is data: a browser must not run it on the listener's origin,
	// which the console shares (an HTML object's script could post the
	// operator's forms there). nosniff keeps the type as stored; the sandbox
	// gives a document shown inline an origin of its own.
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	h.Set("ETag", quoteETag(info.ETag))
	h.Set("Accept-Ranges", "bytes")
	if !info.LastModified.IsZero() {
		h.Set("Last-Modified", info.LastModified.UTC().Format(http.TimeFormat))
	}
	// Values that are not printable ASCII go as RFC 2047 encoded words, as
	// Amazon S3 answers them (fencegate.EncodeMetaText).
	for k, v := range info.Metadata {
		if k = strings.ToLower(k); !strings.HasPrefix(k, "fence-") {
			h.Set("x-amz-meta-"+k, fencegate.EncodeMetaText(v))
		}
	}
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); ok {
		h.Set("x-amz-meta-fence-token", strconv.FormatUint(m.FenceToken, 10))
		h.Set("x-amz-meta-fence-segment", strconv.FormatUint(m.Segment, 10))
		h.Set("x-amz-meta-fence-receipt-id", m.ReceiptID)
		h.Set("x-amz-meta-fence-operation-id", fencegate.EncodeMetaText(m.OperationID))
	}
	rng := headerValue(r.Header, "Range")
	if ir := headerValue(r.Header, "If-Range"); rng != "" && ir != "" && !ifRangeHolds(ir, info) {
		rng = "" // the object changed since the client's copy: all of it (RFC 9110 §13.1.5)
	}
	start, n, ranged, err := parseRange(rng, info.Size)
	if err != nil {
		h.Set("Content-Range", "bytes */"+strconv.FormatInt(info.Size, 10))
		return err
	}
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	status := http.StatusOK
	if ranged {
		h.Set("Content-Range", "bytes "+strconv.FormatInt(start, 10)+"-"+strconv.FormatInt(start+n-1, 10)+"/"+strconv.FormatInt(info.Size, 10))
		status = http.StatusPartialContent
	}
	w.WriteHeader(status)
	if rc == nil {
		return nil
	}
	if start > 0 {
		if sk, ok := rc.(io.Seeker); ok {
			_, err = sk.Seek(start, io.SeekStart)
		} else {
			_, err = io.CopyN(io.Discard, rc, start)
		}
		if err != nil {
			panic(http.ErrAbortHandler) // headers are out: cut the answer short
		}
	}
	if _, err := io.CopyN(w, rc, n); err != nil {
		panic(http.ErrAbortHandler)
	}
	return nil
}

// parseRange reads one "bytes=a-b", "bytes=a-" or "bytes=-n" range (RFC
// 9110 §14.1.2) of an object of size bytes; several ranges are NotImplemented.
func parseRange(h string, size int64) (start, n int64, ranged bool, err error) {
	if h == "" {
		return 0, size, false, nil
	}
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, false, notImplemented("Range " + h)
	}
	a, b, _ := strings.Cut(spec, "-")
	bad := s3err(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The requested range is not satisfiable")
	switch {
	case a == "":
		k, err := strconv.ParseInt(b, 10, 64)
		if err != nil || k <= 0 || size == 0 {
			return 0, 0, false, bad
		}
		k = min(k, size)
		return size - k, k, true, nil
	default:
		first, err := strconv.ParseInt(a, 10, 64)
		if err != nil || first < 0 || first >= size {
			return 0, 0, false, bad
		}
		last := size - 1
		if b != "" {
			if last, err = strconv.ParseInt(b, 10, 64); err != nil || last < first {
				return 0, 0, false, bad
			}
			last = min(last, size-1)
		}
		return first, last - first + 1, true, nil
	}
}

// ifRangeHolds reports whether If-Range's validator names the object as it
// is (RFC 9110 §13.1.5, as Amazon S3 documents If-Range for GetObject):
// its ETag, quoted or not, compared strongly (a weak one never holds). A
// date never holds here: a key can be written twice within one second of
// Last-Modified, so it is no strong validator, and serving the whole object
// is always right. A validator that holds serves the Range; one that does
// not serves the whole object.
func ifRangeHolds(v string, info fencegate.ObjectInfo) bool {
	return quoteETag(v) == quoteETag(info.ETag) // a weak tag or a date, quoted, never equals a strong ETag
}

// preconditions applies a GET's or HEAD's If-Match, If-None-Match,
// If-Unmodified-Since and If-Modified-Since (RFC 9110 §13.2.2, as S3
// documents them for GetObject): 412 PreconditionFailed, or 304 Not
// Modified (done, answered here).
func preconditions(w http.ResponseWriter, r *http.Request, info fencegate.ObjectInfo) (done bool, err error) {
	etag := quoteETag(info.ETag)
	matches := func(list string) bool {
		for _, t := range strings.Split(list, ",") {
			if t = strings.TrimSpace(t); t == "*" || quoteETag(t) == etag {
				return true
			}
		}
		return false
	}
	failed := s3err(http.StatusPreconditionFailed, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
	since := func(h string) (time.Time, bool) {
		t, err := http.ParseTime(headerValue(r.Header, h))
		return t, err == nil && !info.LastModified.IsZero()
	}
	im, inm := headerValue(r.Header, "If-Match"), headerValue(r.Header, "If-None-Match")
	switch {
	case im != "" && !matches(im):
		return false, failed
	case im == "":
		if t, ok := since("If-Unmodified-Since"); ok && info.LastModified.Truncate(time.Second).After(t) {
			return false, failed
		}
	}
	notModified := inm != "" && matches(inm)
	if t, ok := since("If-Modified-Since"); inm == "" && ok && !info.LastModified.Truncate(time.Second).After(t) {
		notModified = true
	}
	if notModified {
		w.Header().Set("ETag", etag)
		w.WriteHeader(http.StatusNotModified)
		return true, nil
	}
	return false, nil
}

// userMeta is a write's x-amz-meta-* headers (names lower-case, without the
// prefix), fence-segment, which numbers the write, left out.
func userMeta(hd http.Header) (map[string]string, error) {
	var m map[string]string
	size := 0
	for k, vs := range hd {
		name, ok := strings.CutPrefix(strings.ToLower(k), "x-amz-meta-")
		if !ok || strings.HasPrefix(name, "fence-") {
			continue
		}
		if m == nil {
			m = map[string]string{}
		}
		// Amazon S3 stores a value sent as RFC 2047 encoded words decoded.
		m[name] = fencegate.DecodeHeaderText(joinValues(vs))
		size += len(name) + len(m[name])
	}
	// fencegate.MaxUserMetaSize, checked before the write is admitted: a
	// store refusing the object's metadata after the admission would leave
	// a receipt and an answer the client could only retry.
	if size > fencegate.MaxUserMetaSize {
		return nil, s3err(http.StatusBadRequest, "MetadataTooLarge", "Your metadata headers exceed the maximum allowed metadata size.")
	}
	return m, nil
}
