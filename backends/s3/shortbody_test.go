package s3_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	fs3 "github.com/fencegate/fencegate/backends/s3"
)

// TestShortSmallDirectPutFailsBeforeItIsSent: a direct PUT of a small body
// (read into memory, attemptBody) with fewer bytes than its size fails
// BACKEND_UNAVAILABLE before any request reaches the store, so it changes
// nothing there. (It is still answered as of unknown outcome, as the SDK
// path answers the same body, which does reach the store cut short.)
func TestShortSmallDirectPutFailsBeforeItIsSent(t *testing.T) {
	var hits atomic.Int32
	s := answering(t, func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	if !fs3.Direct(s) {
		t.Fatal("the test store has no direct PUT template")
	}
	ctx := fencegate.WithLandBy(context.Background(), time.Now().Add(time.Hour))
	_, err := s.Put(ctx, fencegate.PutRequest{Key: "k", Body: strings.NewReader("abc"), Size: 10, IfNoneMatch: true})
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || !strings.Contains(err.Error(), "read the body") {
		t.Fatalf("a 3-byte body of size 10: %v; want BACKEND_UNAVAILABLE (read the body)", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("%d requests reached the store for a body shorter than its size", n)
	}
}
