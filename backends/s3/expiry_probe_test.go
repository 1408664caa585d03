package s3_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	s3store "github.com/fencegate/fencegate/backends/s3"
)

// expiryIgnoringServer is an S3 look-alike (path-style) that keeps
// If-None-Match: * and If-Match on PutObject, as the probe demands, but
// checks no signature, so it also takes a presigned request long after its
// X-Amz-Date + X-Amz-Expires (a store whose clock lags far behind does the
// same). Conditional deletes and multipart uploads are NotImplemented.
func expiryIgnoringServer(t *testing.T) (*httptest.Server, func(path string) bool) {
	var mu sync.Mutex
	objects := map[string][]byte{}
	fail := func(w http.ResponseWriter, status int, code string) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "<Error><Code>"+code+"</Code><Message>"+code+"</Message></Error>")
	}
	etag := func(b []byte) string { sum := md5.Sum(b); return `"` + hex.EncodeToString(sum[:]) + `"` }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, exists := objects[r.URL.Path]
		switch {
		case r.Method == http.MethodPut && r.URL.Query().Get("uploadId") == "":
			b, _ := io.ReadAll(r.Body)
			if r.Header.Get("If-None-Match") == "*" && exists {
				fail(w, http.StatusPreconditionFailed, "PreconditionFailed")
				return
			}
			if m := r.Header.Get("If-Match"); m != "" {
				if !exists {
					fail(w, http.StatusNotFound, "NoSuchKey")
					return
				}
				if m != etag(body) {
					fail(w, http.StatusPreconditionFailed, "PreconditionFailed")
					return
				}
			}
			objects[r.URL.Path] = b
			w.Header().Set("ETag", etag(b))
			w.WriteHeader(http.StatusOK)
		case r.Method == http.MethodHead || r.Method == http.MethodGet:
			if !exists {
				fail(w, http.StatusNotFound, "NoSuchKey")
				return
			}
			w.Header().Set("ETag", etag(body))
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusOK)
		case r.Method == http.MethodDelete && r.Header.Get("If-Match") == "":
			delete(objects, r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
		default:
			fail(w, http.StatusNotImplemented, "NotImplemented")
		}
	}))
	t.Cleanup(srv.Close)
	has := func(suffix string) bool {
		mu.Lock()
		defer mu.Unlock()
		for p := range objects {
			if strings.HasSuffix(p, suffix) {
				return true
			}
		}
		return false
	}
	return srv, has
}

// TestProbeRefusesAStoreThatTakesAnExpiredPresignedWrite: the late-landing
// rule (a write the reconciler calls NOT_APPLIED never lands) rests on the
// store refusing a presigned write that reaches it after X-Amz-Date +
// X-Amz-Expires. A store that keeps the conditional headers but takes an
// expired presigned PUT (it ignores the expiry, or its clock lags far behind
// the gateway's) cannot keep that rule: Probe refuses it as UNSUPPORTED,
// naming the store and X-Amz-Expires, and leaves no scratch object.
func TestProbeRefusesAStoreThatTakesAnExpiredPresignedWrite(t *testing.T) {
	srv, has := expiryIgnoringServer(t)
	st := s3store.New("lax", client(srv.URL, "ak", "sk"), "bucket", "")
	_, err := st.Probe(context.Background())
	if fencegate.ErrorCode(err) != fencegate.CodeUnsupported || !strings.Contains(err.Error(), "X-Amz-Expires") || !strings.Contains(err.Error(), `"lax"`) {
		t.Fatalf("Probe of a store that takes expired presigned writes: %v, want UNSUPPORTED naming the store and X-Amz-Expires", err)
	}
	if has("expired") {
		t.Fatal("the probe's expired write was left in the store")
	}
}
