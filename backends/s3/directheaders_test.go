package s3

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencegate/fencegate"
)

// sent is what a stub server saw of one PUT: its headers and its signed
// header list, without what only the SDK's operation stack sends (its user
// agent, invocation ID and attempt count).
type sent struct {
	header http.Header
	signed []string
}

func sentOf(r *http.Request) sent {
	h := r.Header.Clone()
	for _, k := range []string{"User-Agent", "Amz-Sdk-Invocation-Id", "Amz-Sdk-Request"} {
		delete(h, k)
	}
	var signed []string
	for _, s := range strings.Split(r.URL.Query().Get("X-Amz-SignedHeaders"), ";") {
		if !strings.HasPrefix(s, "amz-sdk-") {
			signed = append(signed, s)
		}
	}
	return sent{h, signed}
}

// TestDirectPutSendsTheHeadersTheSDKSends: a direct PUT (directput.go builds
// its header itself) sends and signs the same headers, with the same names
// and values, as the SDK's PutObject of the same write: the effect's
// metadata (empty values included), the caller's own metadata under the
// names the SDK gives them, the condition, the content type.
func TestDirectPutSendsTheHeadersTheSDKSends(t *testing.T) {
	var got []sent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, sentOf(r))
		w.Header().Set("ETag", `"e2"`)
	}))
	defer srv.Close()
	open := func() *Store {
		return New("h", testClient(func(o *s3.Options) { o.BaseEndpoint, o.UsePathStyle = aws.String(srv.URL), true }), "bkt", "pre")
	}
	direct, viaSDK := open(), open()
	viaSDK.tmpl = nil
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Minute))
	for _, req := range []fencegate.PutRequest{
		{Key: "a b/c", Size: 2, IfMatch: `"e1"`, ContentType: "text/plain",
			Meta:     fencegate.EffectMeta{FenceToken: 7, Segment: 2, Root: "rt", OperationID: "op", PayloadDigest: "sha256:ab", ReceiptID: "r1"},
			UserMeta: map[string]string{"Mtime": "123", "x-Custom_key": "v", "fence-token": "not this one"}},
		{Key: "k", IfNoneMatch: true, Meta: fencegate.EffectMeta{FenceToken: 1, Segment: 1, ReceiptID: "r"}},
	} {
		got = nil
		for _, st := range []*Store{direct, viaSDK} {
			req.Body = strings.NewReader(strings.Repeat("x", int(req.Size)))
			if _, err := st.Put(ctx, req); err != nil {
				t.Fatalf("%s: %v", req.Key, err)
			}
		}
		if len(got) != 2 {
			t.Fatalf("%s: %d requests sent, want 2", req.Key, len(got))
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Errorf("%s:\n direct PUT sent %v\n     signed %v\n SDK sent        %v\n     signed %v",
				req.Key, got[0].header, got[0].signed, got[1].header, got[1].signed)
		}
	}
}
