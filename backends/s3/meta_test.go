package s3

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencegate/fencegate"
)

// printableASCII reports whether s is what S3's REST API takes in a header.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Rule: a write whose operation ID, root or client metadata is not ASCII
// sends every x-amz-meta-* value as printable ASCII (RFC 2047 encoded words,
// which Amazon S3 decodes before storing), by the direct PUT, the SDK's
// PutObject and CreateMultipartUpload alike; and a value answered encoded
// (as Amazon S3 answers non-ASCII metadata) is read back decoded.
func TestNonASCIIMetadataTravelsAsEncodedWords(t *testing.T) {
	meta := fencegate.EffectMeta{FenceToken: 7, Segment: 2, Root: "Wurzel-Größe", OperationID: "Bestellung Müller",
		PayloadDigest: "sha256:ab", ReceiptID: "r1"}
	user := map[string]string{"title": "Crème brûlée"}
	var sent []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Method != http.MethodHead && !q.Has("partNumber") && !q.Has("uploadId") { // the requests that carry metadata
			sent = append(sent, r.Header.Clone())
		}
		switch {
		case r.Method == http.MethodHead:
			w.Header().Set("ETag", `"e1"`)
			w.Header().Set("X-Amz-Meta-Fence-Root", mustEncode("Wurzel-Größe"))
			w.Header().Set("X-Amz-Meta-Title", "=?UTF-8?B?Q3LDqG1lIGJyw7tsw6ll?=") // as Amazon S3 encodes "Crème brûlée"
			w.Header().Set("X-Amz-Meta-Plain", "plain")
		case q.Has("uploads"):
			_, _ = w.Write([]byte(`<InitiateMultipartUploadResult><Bucket>bkt</Bucket><Key>k</Key><UploadId>u1</UploadId></InitiateMultipartUploadResult>`))
		case q.Has("partNumber"):
			w.Header().Set("ETag", `"p1"`)
		case q.Has("uploadId"):
			_, _ = w.Write([]byte(`<CompleteMultipartUploadResult><Bucket>bkt</Bucket><Key>k</Key><ETag>"e3-1"</ETag></CompleteMultipartUploadResult>`))
		default:
			w.Header().Set("ETag", `"e2"`)
		}
	}))
	defer srv.Close()
	open := func(opts ...Option) *Store {
		return New("h", testClient(func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(srv.URL), true }), "bkt", "pre", opts...)
	}
	direct, viaSDK, multipart := open(), open(), open(WithSinglePutLimit(1))
	viaSDK.tmpl = nil
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Minute))
	for _, st := range []*Store{direct, viaSDK, multipart} {
		if _, err := st.Put(ctx, fencegate.PutRequest{Key: "k", Body: strings.NewReader("xx"), Size: 2, IfMatch: `"e1"`,
			Meta: meta, UserMeta: user}); err != nil {
			t.Fatal(err)
		}
	}
	if len(sent) != 3 {
		t.Fatalf("%d requests sent, want 3", len(sent))
	}
	for i, h := range sent {
		n := 0
		for name, vs := range h {
			if !strings.HasPrefix(name, "X-Amz-Meta-") {
				continue
			}
			n++
			for _, v := range vs {
				if !printableASCII(v) {
					t.Errorf("request %d sent %s: %q, not printable ASCII", i, name, v)
				}
			}
		}
		if n != 7 {
			t.Errorf("request %d sent %d metadata headers, want 7: %v", i, n, h)
		}
	}
	info, err := direct.Head(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.Metadata["fence-root"] != "Wurzel-Größe" || info.Metadata["title"] != "Crème brûlée" || info.Metadata["plain"] != "plain" {
		t.Fatalf("metadata read back: %q", info.Metadata)
	}
}

func mustEncode(s string) string { return encodeMeta(map[string]string{"v": s})["v"] }
