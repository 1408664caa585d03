package s3_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/objecttest"
	s3store "github.com/fencegate/fencegate/backends/s3"
)

// flaw is how a conditionsServer departs from S3's conditional writes.
type flaw int

const (
	// keepsAll: every condition as S3 keeps it.
	keepsAll flaw = iota
	// completeCreatesOnMissingKey: CompleteMultipartUpload with If-Match on
	// a key that does not exist creates it (PutObject keeps the rule).
	completeCreatesOnMissingKey
	// completeRefusesEveryIfMatch: CompleteMultipartUpload refuses If-Match
	// even with the object's own ETag (PutObject keeps the rule).
	completeRefusesEveryIfMatch
	// weakETags: every ETag answered is weak (W/"..."), and If-Match
	// compares strongly (RFC 9110 §13.1.1), so it never matches.
	weakETags
	// unquotedIfMatch: ETags are answered quoted but If-Match is compared
	// with the ETag unquoted, so the value answered never matches.
	unquotedIfMatch
)

// conditionsServer is an S3 look-alike (path-style) with PutObject,
// HeadObject, DeleteObject and one-request multipart uploads, which keeps
// every condition the probe checks (If-None-Match: *, If-Match, If-Match on
// a missing key: 404 NoSuchKey; expired presigned requests: 403) except
// where f says otherwise. deleteOnPart set: the object is deleted behind
// the gateway's back when a part arrives.
func conditionsServer(t *testing.T, f flaw) (srv *httptest.Server, deleteOnPart func()) {
	var mu sync.Mutex
	objects := map[string][]byte{}
	uploads := map[string][]byte{}
	onPart := false
	fail := func(w http.ResponseWriter, status int, code string) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "<Error><Code>"+code+"</Code><Message>"+code+"</Message></Error>")
	}
	etag := func(b []byte) string {
		sum := md5.Sum(b)
		if f == weakETags {
			return `W/"` + hex.EncodeToString(sum[:]) + `"`
		}
		return `"` + hex.EncodeToString(sum[:]) + `"`
	}
	// refused: the answer to the request's conditions on the object at
	// path (0: they hold).
	refused := func(r *http.Request, body []byte, exists, complete bool) (int, string) {
		if r.Header.Get("If-None-Match") == "*" && exists {
			return http.StatusPreconditionFailed, "PreconditionFailed"
		}
		m := r.Header.Get("If-Match")
		switch {
		case m == "":
			return 0, ""
		case !exists && !(complete && f == completeCreatesOnMissingKey):
			return http.StatusNotFound, "NoSuchKey"
		case !exists:
			return 0, ""
		case complete && f == completeRefusesEveryIfMatch, strings.HasPrefix(m, "W/"),
			f == unquotedIfMatch && m != strings.Trim(etag(body), `"`), f != unquotedIfMatch && m != etag(body):
			return http.StatusPreconditionFailed, "PreconditionFailed"
		}
		return 0, ""
	}
	n := 0
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		q := r.URL.Query()
		if d := q.Get("X-Amz-Date"); d != "" {
			at, _ := time.Parse("20060102T150405Z", d)
			secs, _ := strconv.Atoi(q.Get("X-Amz-Expires"))
			if time.Now().After(at.Add(time.Duration(secs) * time.Second)) {
				fail(w, http.StatusForbidden, "AccessDenied")
				return
			}
		}
		path, id := r.URL.Path, q.Get("uploadId")
		body, exists := objects[path]
		_, initiate := q["uploads"]
		switch {
		case r.Method == http.MethodPost && initiate:
			n++
			uploads[strconv.Itoa(n)] = nil
			fmt.Fprintf(w, `<InitiateMultipartUploadResult><UploadId>%d</UploadId></InitiateMultipartUploadResult>`, n)
		case r.Method == http.MethodPut && id != "":
			b, _ := io.ReadAll(r.Body)
			uploads[id] = append(uploads[id], b...)
			if onPart {
				delete(objects, path)
			}
			w.Header().Set("ETag", etag(b))
		case r.Method == http.MethodPost && id != "":
			_, _ = io.ReadAll(r.Body)
			if st, code := refused(r, body, exists, true); st != 0 {
				fail(w, st, code)
				return
			}
			objects[path] = uploads[id]
			delete(uploads, id)
			fmt.Fprintf(w, `<CompleteMultipartUploadResult><ETag>%s</ETag></CompleteMultipartUploadResult>`, etag(objects[path]))
		case r.Method == http.MethodDelete && id != "":
			delete(uploads, id)
			w.WriteHeader(http.StatusNoContent)
		case r.Method == http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			if st, code := refused(r, body, exists, false); st != 0 {
				fail(w, st, code)
				return
			}
			objects[path] = b
			w.Header().Set("ETag", etag(b))
		case r.Method == http.MethodHead || r.Method == http.MethodGet:
			if !exists {
				fail(w, http.StatusNotFound, "NoSuchKey")
				return
			}
			w.Header().Set("ETag", etag(body))
			w.Header().Set("Content-Length", "0")
		case r.Method == http.MethodDelete && r.Header.Get("If-Match") == "":
			delete(objects, path)
			w.WriteHeader(http.StatusNoContent)
		default:
			fail(w, http.StatusNotImplemented, "NotImplemented")
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() { mu.Lock(); onPart = true; mu.Unlock() }
}

// multipartStore is a store on srv whose objects above 1 MiB go multipart.
func multipartStore(srv *httptest.Server) *s3store.Store {
	return s3store.New("mp", client(srv.URL, "ak", "sk"), "bucket", "", s3store.WithSinglePutLimit(1<<20), s3store.WithPartSize(5<<20))
}

// TestProbeAdmitsAStoreKeepingEveryCondition is the control of the tests
// below: the look-alike without a flaw passes the probe with conditional
// multipart completion, and an object deleted behind the gateway's back
// during a multipart overwrite chained on its ETag is a failed
// precondition (BACKEND_CONFLICT upstream), not re-created.
func TestProbeAdmitsAStoreKeepingEveryCondition(t *testing.T) {
	srv, deleteOnPart := conditionsServer(t, keepsAll)
	st := multipartStore(srv)
	caps, err := st.Probe(context.Background())
	if err != nil || !caps.ConditionalMultipart {
		t.Fatalf("probe of a store keeping every condition: %+v, %v; want conditional multipart", caps, err)
	}
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Minute))
	const n = 6 << 20
	etag, err := st.Put(ctx, fencegate.PutRequest{Key: "big", Body: &gen{n: n}, Size: n, IfNoneMatch: true, Meta: objecttest.Meta(1)})
	if err != nil {
		t.Fatal(err)
	}
	deleteOnPart()
	_, err = st.Put(ctx, fencegate.PutRequest{Key: "big", Body: &gen{n: n}, Size: n, IfMatch: etag, Meta: objecttest.Meta(2)})
	if !errors.Is(err, fencegate.ErrPreconditionFailed) {
		t.Fatalf("multipart overwrite of an object deleted during the upload: %v; want a failed precondition", err)
	}
}

// TestProbeDisablesMultipartOnAStoreCompletingIfMatchOnAMissingKey: a
// store whose CompleteMultipartUpload creates a missing key under If-Match
// would re-create an object deleted behind the gateway's back during an
// upload and settle the write COMMITTED. The probe finds it: conditional
// multipart completion is off, and an object needing a multipart upload is
// refused UNSUPPORTED, naming the missing capability, with nothing written.
func TestProbeDisablesMultipartOnAStoreCompletingIfMatchOnAMissingKey(t *testing.T) {
	testProbeDisablesMultipart(t, completeCreatesOnMissingKey)
}

// TestProbeDisablesMultipartOnAStoreRefusingTheRightETagOnComplete: a store
// whose CompleteMultipartUpload refuses If-Match with the object's own ETag
// would fail every multipart overwrite after its admission; the probe turns
// conditional multipart completion off instead.
func TestProbeDisablesMultipartOnAStoreRefusingTheRightETagOnComplete(t *testing.T) {
	testProbeDisablesMultipart(t, completeRefusesEveryIfMatch)
}

func testProbeDisablesMultipart(t *testing.T, f flaw) {
	srv, _ := conditionsServer(t, f)
	st := multipartStore(srv)
	caps, err := st.Probe(context.Background())
	if err != nil {
		t.Fatalf("probe: %v; the flaw is in multipart completion only, which is not fatal", err)
	}
	if caps.ConditionalMultipart || st.Capabilities().ConditionalMultipart {
		t.Fatalf("probe: %+v; want conditional multipart completion off", caps)
	}
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Minute))
	const n = 6 << 20
	_, err = st.Put(ctx, fencegate.PutRequest{Key: "big", Body: &gen{n: n}, Size: n, IfNoneMatch: true, Meta: objecttest.Meta(1)})
	if fencegate.ErrorCode(err) != fencegate.CodeUnsupported || !strings.Contains(err.Error(), "multipart") {
		t.Fatalf("object needing a multipart upload: %v; want UNSUPPORTED naming multipart", err)
	}
	if _, err := st.Head(context.Background(), "big"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("head after the refused write: %v; want NOT_FOUND", err)
	}
}

// TestProbeRefusesAStoreThatRefusesTheETagItAnswered: a store that refuses
// If-Match with the very ETag it answered (weak ETags under If-Match's
// strong comparison; an ETag compared unquoted) would fail every write of a
// key after its first, after the gateway admitted it. The probe refuses it
// at start-up: UNSUPPORTED, naming the store and If-Match.
func TestProbeRefusesAStoreThatRefusesTheETagItAnswered(t *testing.T) {
	for name, f := range map[string]flaw{"weak ETags": weakETags, "unquoted comparison": unquotedIfMatch} {
		srv, _ := conditionsServer(t, f)
		_, err := s3store.New("strict", client(srv.URL, "ak", "sk"), "bucket", "").Probe(context.Background())
		if fencegate.ErrorCode(err) != fencegate.CodeUnsupported || !strings.Contains(err.Error(), `store "strict"`) ||
			!strings.Contains(err.Error(), "If-Match") {
			t.Errorf("%s: probe %v; want UNSUPPORTED naming the store and If-Match", name, err)
		}
	}
}
