package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// holdingProxy forwards requests to target; a PUT for which hold says true is
// read whole and kept until release is closed, then sent on under a context
// of its own, whether or not its client still waits: a request already in
// the network that reaches the server late. The status S3 answered it is sent
// on landed.
func holdingProxy(t *testing.T, target string, hold func(*http.Request) bool, release <-chan struct{}) (*httptest.Server, <-chan int) {
	t.Helper()
	return holdingProxyFor(t, target, func(r *http.Request) bool { return r.Method == http.MethodPut && hold(r) }, release)
}

// holdingProxyFor is holdingProxy holding every request hold picks, of any
// method (a HEAD too, so that the reconciler cannot look).
func holdingProxyFor(t *testing.T, target string, hold func(*http.Request) bool, release <-chan struct{}) (*httptest.Server, <-chan int) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	landed := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		held := hold(r)
		if held {
			<-release
		}
		out, err := http.NewRequestWithContext(context.Background(), r.Method, u.Scheme+"://"+u.Host+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			return
		}
		out.Header = r.Header.Clone()
		out.Host = r.Host // signed for the host the client dialled
		resp, err := http.DefaultClient.Do(out)
		status := 0
		if err == nil {
			status = resp.StatusCode
			defer resp.Body.Close()
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			_, _ = io.Copy(w, resp.Body)
		}
		if held {
			select {
			case landed <- status: // the first held request's answer
			default:
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv, landed
}

// TestLatePutAfterOrphanGraceNeverOverwritesANotAppliedVerdict is the
// minimal form of what e2e/chaos found when it paused the S3 server past
// reconcile.orphan (FENCEGATE_CHAOS_STALL=1): a PUT the gateway gave up on
// (effectTimeout) is still in the network while the reconciler settles its
// receipt. The rule it checks: after NOT_APPLIED, the object never holds that
// write. It holds because the gateway sends the PUT presigned to expire at
// the receipt's effect expiry (gateway.EffectExpiry), the S3 server refuses it
// when it arrives later, and the reconciler calls the write NOT_APPLIED only
// reconcile.orphan after that expiry.
func TestLatePutAfterOrphanGraceNeverOverwritesANotAppliedVerdict(t *testing.T) {
	b := newS3Bucket(t)
	release := make(chan struct{})
	proxy, landed := holdingProxy(t, b.srv.Endpoint, func(r *http.Request) bool {
		return r.Header.Get("X-Amz-Meta-Fence-Segment") == "2"
	}, release)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(cfg, []byte("effectTimeout: 2s\nreconcile: {interval: 100ms, deadline: 15m, orphan: 3s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startGatewayEnv(t, b.env(), "dev", "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
		"--identity", "worker-a=token-a", "--store", "s3a="+b.storeURL(proxy.URL))

	l := p.acquire(t, "token-a", "s3a/late", "late-1", "late-op", 60000)
	if a := p.put(t, "token-a", l, "s3a/late", 1, "one"); a.status != http.StatusOK {
		t.Fatalf("segment 1: %d %s", a.status, a.body)
	}
	unknown := p.put(t, "token-a", l, "s3a/late", 2, "two")
	wantCode(t, unknown, http.StatusBadGateway, "MUTATION_UNKNOWN")
	id := unknown.str("receiptId")

	// The reconciler settles segment 2 while its PUT is still held.
	var state string
	deadline := time.Now().Add(30 * time.Second)
	for state == "" || state == "UNKNOWN" || state == "PENDING" {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("segment 2 still %s after 30s", state)
		}
		time.Sleep(100 * time.Millisecond)
		state = p.do(t, "GET", "/v1/receipts/"+id, "token-a", nil, "").str("state")
	}
	close(release)
	status := <-landed
	got := b.get(t, "late")
	t.Logf("segment 2 settled %s; its held PUT then reached S3: %d; the object holds %q", state, status, got)
	if state != "NOT_APPLIED" {
		t.Fatalf("segment 2 settled %s, want NOT_APPLIED (its PUT never reached S3 in time)", state)
	}
	if status < 400 {
		t.Fatalf("the held PUT reached S3 after its expiry and was answered %d, want a refusal", status)
	}
	switch {
	case state == "NOT_APPLIED" && got != "one":
		t.Fatalf("receipt NOT_APPLIED, but the object holds %q (the late PUT landed: %d)", got, status)
	case state == "COMMITTED" && got != "two":
		t.Fatalf("receipt COMMITTED, but the object holds %q", got)
	}
}
