package s3_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/objecttest"
	fs3 "github.com/fencegate/fencegate/backends/s3"
	"github.com/fencegate/fencegate/internal/testenv"
)

// heldPuts forwards requests to target; a PUT is read whole and kept until
// hold's channel yields, then sent on: a request that reaches S3 late. The
// query string of every PUT is sent on queries.
func heldPuts(t *testing.T, target string, hold <-chan struct{}) (*httptest.Server, <-chan url.Values) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	queries := make(chan url.Values, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if r.Method == http.MethodPut {
			queries <- r.URL.Query()
			<-hold
		}
		out, err := http.NewRequestWithContext(context.Background(), r.Method, u.Scheme+"://"+u.Host+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			return
		}
		out.Header = r.Header.Clone()
		out.Host = r.Host
		resp, err := http.DefaultClient.Do(out)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(srv.Close)
	return srv, queries
}

// TestPutHeldPastItsLandingDeadlineIsRefusedByTheStore: a write with a
// landing deadline goes out presigned (X-Amz-Expires at or before the
// deadline); held in the network until after it, the S3 server itself
// refuses it and the object keeps its bytes. The same write delivered in
// time lands.
func TestPutHeldPastItsLandingDeadlineIsRefusedByTheStore(t *testing.T) {
	srv := testenv.S3Server(t)
	prefix := testenv.RandomName("t_")
	direct := fs3.New("s3test", client(srv.Endpoint, srv.AccessKey, srv.SecretKey), srv.Bucket, prefix)
	key := objecttest.Key("held")
	etag := objecttest.Create(t, direct, key, "before")

	hold := make(chan struct{})
	proxy, queries := heldPuts(t, srv.Endpoint, hold)
	viaProxy := fs3.New("s3test", client(proxy.URL, srv.AccessKey, srv.SecretKey), srv.Bucket, prefix)
	landBy := time.Now().Add(time.Second)
	ctx := fencegate.WithLandBy(context.Background(), landBy)
	done := make(chan error, 1)
	go func() {
		_, err := viaProxy.Put(ctx, fencegate.PutRequest{Key: key, Body: strings.NewReader("late"), Size: 4, IfMatch: etag, Meta: objecttest.Meta(2)})
		done <- err
	}()
	q := <-queries
	if q.Get("X-Amz-Signature") == "" || q.Get("X-Amz-Expires") == "" {
		close(hold)
		t.Fatalf("a write with a landing deadline went out without query authentication: %v", q)
	}
	signed, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	if err != nil {
		close(hold)
		t.Fatalf("X-Amz-Date %q: %v", q.Get("X-Amz-Date"), err)
	}
	secs, err := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err != nil || !signed.Add(time.Duration(secs)*time.Second).Before(landBy.Add(fencegate.LandBySlack)) {
		close(hold)
		t.Fatalf("X-Amz-Date %s + X-Amz-Expires %s is not within LandBySlack of the landing deadline %s", signed, q.Get("X-Amz-Expires"), landBy.UTC())
	}
	// Held until the store's clock is past the deadline and its slack.
	time.Sleep(time.Until(landBy.Add(fencegate.LandBySlack + 200*time.Millisecond)))
	close(hold)
	if err := <-done; err == nil {
		t.Fatal("the held write was applied after its landing deadline")
	}
	if body, info := objecttest.Content(t, direct, key); body != "before" || info.ETag != etag {
		t.Fatalf("object holds %q (ETag %s) after a write refused for arriving late", body, info.ETag)
	}
	for len(queries) > 0 { // the SDK's own retries were held and refused too
		<-queries
	}

	// Delivered in time, the same write lands.
	ctx = fencegate.WithLandBy(context.Background(), time.Now().Add(time.Minute))
	if _, err := viaProxy.Put(ctx, fencegate.PutRequest{Key: key, Body: strings.NewReader("in time"), Size: 7, IfMatch: etag, Meta: objecttest.Meta(3)}); err != nil {
		t.Fatalf("presigned write within its deadline: %v", err)
	}
	if body, _ := objecttest.Content(t, direct, key); body != "in time" {
		t.Fatalf("object holds %q, want the write delivered in time", body)
	}
}
