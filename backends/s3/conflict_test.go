package s3_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/fencegate/fencegate"
	fs3 "github.com/fencegate/fencegate/backends/s3"
	"github.com/fencegate/fencegate/gateway"
)

// slowApplyStore is an S3 stand-in for one key: the first PUT is taken in
// (headers and body) and its connection dropped before any answer, as a
// network fault does, while the store goes on applying it; until apply is
// called it is "in progress", and S3 answers a second conditional write to
// the key with 409 ConditionalRequestConflict, as AWS documents for
// concurrent conditional writes. HEAD shows the object as it is.
type slowApplyStore struct {
	mu      sync.Mutex
	etag    string
	meta    http.Header // x-amz-meta-* of the current object
	pending http.Header // the in-flight first PUT's header
	puts    int
}

func (s *slowApplyStore) apply() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending != nil {
		s.etag, s.meta, s.pending = `"applied-by-attempt-1"`, s.pending, nil
	}
}

func (s *slowApplyStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodHead:
		for k, v := range s.meta {
			w.Header()[k] = v
		}
		w.Header().Set("ETag", s.etag)
		w.Header().Set("Content-Length", "0")
		return
	case http.MethodPut:
		s.puts++
		if s.puts == 1 {
			s.pending = http.Header{}
			for k, v := range r.Header {
				if strings.HasPrefix(strings.ToLower(k), "x-amz-meta-") {
					s.pending[k] = v
				}
			}
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close() // the answer is lost
			}
			return
		}
		if s.pending != nil {
			s3Error(w, http.StatusConflict, "ConditionalRequestConflict")
			return
		}
		s3Error(w, http.StatusPreconditionFailed, "PreconditionFailed")
	}
}

// TestConflictAfterALostAttemptLeavesTheWriteUnknown: the first attempt of a
// conditional PUT reaches the store and its answer is lost; the retries
// meet 409 ConditionalRequestConflict because that very attempt is still
// being applied. The write's outcome is UNKNOWN (the reconciler settles it
// from the object after its expiry), not FAILED with BACKEND_CONFLICT, a
// final state that frees the segment: the first attempt then lands with
// this receipt's ID.
func TestConflictAfterALostAttemptLeavesTheWriteUnknown(t *testing.T) {
	for _, path := range []string{"sdk", "presigned"} {
		t.Run(path, func(t *testing.T) {
			fake := &slowApplyStore{etag: `"old"`, meta: http.Header{
				"X-Amz-Meta-Fence-Token": {"1"}, "X-Amz-Meta-Fence-Segment": {"1"}, "X-Amz-Meta-Fence-Receipt-Id": {"rcpt_old"}}}
			srv := httptest.NewServer(fake)
			t.Cleanup(srv.Close)
			c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
				Credentials: credentials.NewStaticCredentialsProvider("AK", "SK", ""),
				Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
					o.MaxAttempts = 3
					o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 5 * time.Millisecond, nil })
				})})
			st := fs3.New("s3x", c, "bucket", "")
			ctx := context.Background()
			if path == "presigned" {
				ctx = fencegate.WithLandBy(ctx, time.Now().Add(time.Minute))
			}
			rcpt := fencegate.Receipt{ID: "rcpt_new", FenceToken: 1, Segment: 2, OperationRoot: "root", OperationID: "op",
				PayloadDigest: "sha256:x", CreatedAt: time.Now()}
			out, err := gateway.ObjectPut{Store: st, Key: "k", Body: strings.NewReader("new"), Size: 3}.Apply(ctx, rcpt, `"old"`)
			fake.apply() // the first attempt finishes landing
			info, herr := st.Head(context.Background(), "k")
			if herr != nil || info.Metadata[fencegate.MetaReceipt] != "rcpt_new" || fake.puts < 2 {
				t.Fatalf("setup: %d PUTs, object %v, %v; want the first attempt landed after retries", fake.puts, info.Metadata, herr)
			}
			if out.State != fencegate.ReceiptUnknown {
				t.Fatalf("outcome %s (%v) for a write whose first attempt landed later; want UNKNOWN", out.State, err)
			}
		})
	}
}
