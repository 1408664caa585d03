package s3_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	fs3 "github.com/fencegate/fencegate/backends/s3"
)

func TestProbeRefusesStoreIgnoringConditions(t *testing.T) {
	srv := ignoringServer(t)
	s := fs3.New("s3a", client(srv.URL, "AK", "SK"), "bucket", "pre")
	_, err := s.Probe(context.Background())
	if fencegate.ErrorCode(err) != fencegate.CodeUnsupported {
		t.Fatalf("probe of a store ignoring conditions: %v; want UNSUPPORTED", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `store "s3a"`) || !strings.Contains(msg, "If-None-Match") {
		t.Fatalf("probe error %q must name the store and the missing capability", msg)
	}
}

func TestParseURLReadsBucketPrefixAndParameters(t *testing.T) {
	u, err := fs3.ParseURL("s3://bkt/a/b/?endpoint=http://127.0.0.1:7070&region=eu-west-1&pathStyle=true")
	if err != nil {
		t.Fatal(err)
	}
	want := fs3.URL{Bucket: "bkt", Prefix: "a/b", Endpoint: "http://127.0.0.1:7070", Region: "eu-west-1", PathStyle: true}
	if u != want {
		t.Fatalf("got %+v; want %+v", u, want)
	}
}

func TestParseURLRejectsMalformedURLs(t *testing.T) {
	for _, raw := range []string{
		"http://bkt/p", "s3:///p", "s3://bkt/p?colour=red", "s3://bkt?pathStyle=maybe",
		"s3://bkt?endpoint=localhost:9000", "s3://bkt/a/../b", "s3://user@bkt",
	} {
		if _, err := fs3.ParseURL(raw); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			t.Errorf("ParseURL(%q) = %v; want INVALID_REQUEST", raw, err)
		}
	}
}

func TestDeleteWithoutConditionalDeleteIsUnsupported(t *testing.T) {
	srv := ignoringServer(t)
	s := fs3.New("s3a", client(srv.URL, "AK", "SK"), "bucket", "", fs3.WithCapabilities(fs3.Capabilities{}))
	err := s.Delete(context.Background(), "k", `"abc"`)
	if fencegate.ErrorCode(err) != fencegate.CodeUnsupported {
		t.Fatalf("delete: %v; want UNSUPPORTED", err)
	}
}

// TestProbeRefusesAStoreWhoseHeadAnswersAnotherETag: writes are chained on
// the ETag a PUT answers, proofs record the one a HEAD answers: a store
// whose two differ for one object (here the PUT's unquoted, or none) is
// refused at start (UNSUPPORTED, naming both), not found out by a key whose
// every later write is refused.
func TestProbeRefusesAStoreWhoseHeadAnswersAnotherETag(t *testing.T) {
	for name, etag := range map[string]func(string) string{
		"unquoted": func(q string) string { return strings.Trim(q, `"`) },
		"none":     func(string) string { return "" },
	} {
		srv := conditionalServer(t, etag)
		s := fs3.New("s3a", client(srv.URL, "AK", "SK"), "bucket", "pre")
		_, err := s.Probe(context.Background())
		if fencegate.ErrorCode(err) != fencegate.CodeUnsupported || !strings.Contains(err.Error(), "to a HEAD of the same object") {
			t.Errorf("%s ETag on PUT: probe %v; want UNSUPPORTED naming the two ETags", name, err)
		}
	}
}

// TestRequestTheStoreRefusesAsTooLargeIsInvalid: a PUT the store refuses
// for its own size (400 MetadataTooLarge, S3's answer to more than 2 KB of
// user metadata) is refused whenever it is sent: INVALID_REQUEST, not the
// BACKEND_UNAVAILABLE a client would retry.
func TestRequestTheStoreRefusesAsTooLargeIsInvalid(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>MetadataTooLarge</Code>`+
			`<Message>Your metadata headers exceed the maximum allowed metadata size.</Message></Error>`)
	}))
	defer srv.Close()
	s := fs3.New("s3a", client(srv.URL, "AK", "SK"), "bucket", "")
	_, err := s.Put(context.Background(), fencegate.PutRequest{Key: "k", Body: strings.NewReader("x"), Size: 1, IfNoneMatch: true})
	if fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest || !strings.Contains(err.Error(), "MetadataTooLarge") {
		t.Fatalf("put refused as MetadataTooLarge: %v; want INVALID_REQUEST naming it", err)
	}
}
