package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/s3cred"
)

// s3World is a registry-bearing gateway (config.Dev) with a gateway identity
// for replicas.
type s3World struct {
	t   *testing.T
	app *App
	srv *httptest.Server
}

func newS3World(t *testing.T) *s3World {
	cfg := config.Dev()
	cfg.DataDir = t.TempDir()
	cfg.Identities = []config.Identity{{Name: "worker-a", Token: "token-a"}, {Name: "worker-b", Token: "token-b"}}
	cfg.Admins = []config.Identity{{Name: "admin", Token: "token-admin"}}
	cfg.Gateways = []config.Identity{{Name: "replica", Token: "token-gw"}}
	a, err := Build(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(a.Close)
	a.ready.Store(true)
	w := &s3World{t: t, app: a, srv: httptest.NewServer(a.handler)}
	t.Cleanup(w.srv.Close)
	return w
}

func (w *s3World) call(method, path, token, body string) (int, fencegate.LeaseAnswer, string) {
	w.t.Helper()
	req, _ := http.NewRequest(method, w.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a fencegate.LeaseAnswer
	_ = json.Unmarshal(raw, &a)
	return resp.StatusCode, a, string(raw)
}

func (w *s3World) acquire(token, resource, reqID string) fencegate.LeaseAnswer {
	w.t.Helper()
	code, a, raw := w.call("POST", "/v1/leases", token,
		`{"resource":"`+resource+`","requestId":"`+reqID+`","ttlMs":60000,"operationId":"op","s3Credentials":true}`)
	if code != http.StatusCreated || a.S3Credentials == nil {
		w.t.Fatalf("acquire %s: %d %s", resource, code, raw)
	}
	return a
}

func TestLeaseCredentialsResolveToTheLeaseUntilItIsReleased(t *testing.T) {
	w := newS3World(t)
	a := w.acquire("token-a", "local/reports/7", "r-1")
	c := *a.S3Credentials
	ctx := context.Background()
	got, err := w.app.S3Credentials.LookupS3(ctx, c.AccessKeyID)
	if err != nil {
		t.Fatal(err)
	}
	if got.SecretAccessKey != c.SecretAccessKey || got.Identity != "worker-a" || got.Resource != "local/reports/7" ||
		got.Lease != a.Lease || got.State != fencegate.StateHeld || got.Grant != a.Grant {
		t.Fatalf("lookup %+v does not match the lease %+v", got, a)
	}
	// The same lease keeps its credentials through a renewal and a status read.
	if code, r, raw := w.call("POST", "/v1/leases/"+a.Lease+"/renew", "token-a", `{"ttlMs":60000,"s3Credentials":true}`); code != 200 || *r.S3Credentials != c {
		t.Fatalf("renew: %d %s", code, raw)
	}
	if code, r, raw := w.call("GET", "/v1/leases/"+a.Lease+"?s3Credentials=true", "token-a", ""); code != 200 || *r.S3Credentials != c {
		t.Fatalf("status: %d %s", code, raw)
	}
	if code, _, _ := w.call("DELETE", "/v1/leases/"+a.Lease, "token-a", ""); code != 200 {
		t.Fatalf("release: %d", code)
	}
	got, err = w.app.S3Credentials.LookupS3(ctx, c.AccessKeyID)
	if err != nil || got.State != fencegate.StateReleased {
		t.Fatalf("lookup right after release: %+v, %v; want RELEASED", got, err)
	}
}

func TestLeaseCredentialsAreOnlyTheOwnersAndAnswerNothingUnasked(t *testing.T) {
	w := newS3World(t)
	a := w.acquire("token-a", "local/reports/8", "r-1")
	if code, _, raw := w.call("GET", "/v1/leases/"+a.Lease+"?s3Credentials=true", "token-b", ""); code != http.StatusForbidden || strings.Contains(raw, "secretAccessKey") {
		t.Fatalf("another workload read the credentials: %d %s", code, raw)
	}
	if code, r, _ := w.call("GET", "/v1/leases/"+a.Lease, "token-a", ""); code != 200 || r.S3Credentials != nil {
		t.Fatalf("credentials answered unasked: %d %+v", code, r.S3Credentials)
	}
	if code, _, raw := w.call("GET", "/v1/leases/"+a.Lease+"?s3Credentials=yes", "token-a", ""); code != http.StatusBadRequest {
		t.Fatalf("bad s3Credentials value: %d %s", code, raw)
	}
	// The replica route is for gateway identities only.
	if code, _, raw := w.call("POST", "/v1/leases/"+a.Lease+"/s3-resolve", "token-a", ""); code != http.StatusForbidden || strings.Contains(raw, "secretAccessKey") {
		t.Fatalf("a workload resolved a lease's secret: %d %s", code, raw)
	}
	b := w.acquire("token-b", "local/reports/9", "r-2")
	if a.S3Credentials.AccessKeyID == b.S3Credentials.AccessKeyID || a.S3Credentials.SecretAccessKey == b.S3Credentials.SecretAccessKey {
		t.Fatal("two leases share credentials")
	}
}

func TestReplicaResolvesLeaseCredentialsThroughTheRegistry(t *testing.T) {
	w := newS3World(t)
	a := w.acquire("token-a", "local/reports/10", "r-1")
	q, err := newRemoteQuerier(w.srv.URL, "token-gw", w.app.auth.Verifier(), nil)
	if err != nil {
		t.Fatal(err)
	}
	replica := &s3cred.Resolver{Verifier: w.app.auth.Verifier(), Source: q}
	ctx := context.Background()
	got, err := replica.LookupS3(ctx, a.S3Credentials.AccessKeyID)
	if err != nil || got.State != fencegate.StateHeld || got.SecretAccessKey != a.S3Credentials.SecretAccessKey || got.Identity != "worker-a" {
		t.Fatalf("replica lookup: %+v, %v", got, err)
	}
	unknown, _ := s3cred.AccessKeyID("lease_NOSUCHLEASE")
	if _, err := replica.LookupS3(ctx, unknown); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("unknown lease at the replica: %v, want NOT_FOUND", err)
	}
	w.call("DELETE", "/v1/leases/"+a.Lease, "token-a", "")
	if got, err := replica.LookupS3(ctx, a.S3Credentials.AccessKeyID); err != nil || got.State != fencegate.StateReleased {
		t.Fatalf("replica lookup after release: %+v, %v; want RELEASED", got, err)
	}
	bad, _ := newRemoteQuerier(w.srv.URL, "token-wrong", w.app.auth.Verifier(), nil)
	if _, err := (&s3cred.Resolver{Verifier: w.app.auth.Verifier(), Source: bad}).LookupS3(ctx, a.S3Credentials.AccessKeyID); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("replica with a wrong gateway credential: %v, want BACKEND_UNAVAILABLE", err)
	}
}

// BenchmarkS3CredentialLookup measures what the front door pays per request
// to resolve a lease's credentials in process (lease read, status proof
// signed and verified, grant verified from the cache) against the bare
// lease status read and signing (Registry.Status) in the same run.
func BenchmarkS3CredentialLookup(b *testing.B) {
	cfg := config.Dev()
	cfg.DataDir = b.TempDir()
	cfg.Identities = []config.Identity{{Name: "worker-a", Token: "token-a"}}
	a, err := Build(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	is, err := a.Registry.Acquire(ctx, "worker-a", registry.AcquireParams{Resource: "local/bench/1", RequestID: "r-1", OperationID: "op", TTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	keys, err := a.Registry.S3Credentials(is)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("baseline-status", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.Registry.Status(ctx, is.Lease.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lookup", func(b *testing.B) {
		for b.Loop() {
			if c, err := a.S3Credentials.LookupS3(ctx, keys.AccessKeyID); err != nil || c.State != fencegate.StateHeld {
				b.Fatal(c.State, err)
			}
		}
	})
}

// TestLeaseMillisecondsOutOfRangeAreRefused: a ttlMs (or a renewal's) too
// large for a duration is INVALID_REQUEST and acquires nothing, where it
// wrapped into an ordinary TTL (2^58+30000 ms read as 30 s) and was
// granted.
func TestLeaseMillisecondsOutOfRangeAreRefused(t *testing.T) {
	w := newS3World(t)
	const wrapsTo30s = "288230376151741744"
	if code, _, raw := w.call("POST", "/v1/leases", "token-a",
		`{"resource":"local/reports/30","requestId":"r-1","ttlMs":`+wrapsTo30s+`,"operationId":"op"}`); code != http.StatusBadRequest ||
		!strings.Contains(raw, "INVALID_REQUEST") {
		t.Fatalf("acquire with ttlMs %s: %d %s; want 400 INVALID_REQUEST", wrapsTo30s, code, raw)
	}
	a := w.acquire("token-b", "local/reports/30", "r-2") // nothing was acquired: the resource is free
	_, before, raw := w.call("GET", "/v1/leases/"+a.Lease, "token-b", "")
	if before.ExpiresAt.IsZero() || before.State != fencegate.StateHeld {
		t.Fatalf("lease before the renewal: %s", raw)
	}
	if code, _, raw := w.call("POST", "/v1/leases/"+a.Lease+"/renew", "token-b", `{"ttlMs":`+wrapsTo30s+`}`); code != http.StatusBadRequest ||
		!strings.Contains(raw, "INVALID_REQUEST") {
		t.Fatalf("renew with ttlMs %s: %d %s; want 400 INVALID_REQUEST", wrapsTo30s, code, raw)
	}
	if _, after, _ := w.call("GET", "/v1/leases/"+a.Lease, "token-b", ""); after.State != before.State ||
		!after.ExpiresAt.Equal(before.ExpiresAt) || after.FenceToken != before.FenceToken {
		t.Fatalf("a refused renewal changed the lease: %+v -> %+v", before, after)
	}
}
