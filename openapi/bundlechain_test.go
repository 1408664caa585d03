package openapi_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/handlers"
)

// chainAdmin is the fake admin with a real signing authority's chain.
type chainAdmin struct {
	*fakeAdmin
	auth *authority.Authority
}

func (c chainAdmin) TrustBundleChain(ctx context.Context, after uint64) (fencegate.BundleChain, error) {
	return c.auth.TrustBundleChain(ctx, after)
}

// TestTrustBundleChainAnswersAsDocumented: GET /v1/trust-bundle/chain
// answers a gateway identity the bundles a signing authority published
// after `after` (a rotation and a retirement: two), an empty chain from
// the version in force, NOT_FOUND from a version older than it keeps,
// INVALID_REQUEST for an `after` that is no version, and FORBIDDEN to a
// workload; every answer as openapi.yaml documents it.
func TestTrustBundleChainAnswersAsDocumented(t *testing.T) {
	dir := t.TempDir()
	auth, err := authority.Open(authority.Config{Signing: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Files: authority.Files{State: filepath.Join(dir, "state.json"), Bundle: filepath.Join(dir, "bundle.json"), Key: filepath.Join(dir, "key")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := auth.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for range authority.ChainLength {
		if _, err := auth.RotateKey(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cur := auth.Verifier().Bundle().Version()
	e := newEnv(t, func(s *handlers.Server, a *fakeAdmin) {
		s.GatewayAuth = handlers.NewBearerTokens(map[string]string{"gw-token": "replica"})
		s.Admin = chainAdmin{fakeAdmin: a, auth: auth}
	})
	_, body := e.call("GET", "/v1/trust-bundle/chain?after=1", "gw-token", nil, "", 404)
	wantCode(t, body, fencegate.CodeNotFound)
	after := cur - 2
	_, body = e.call("GET", "/v1/trust-bundle/chain?after="+itoa(after), "gw-token", nil, "", 200)
	if links, _ := body["bundles"].([]any); len(links) != 2 {
		t.Fatalf("chain after %d of %d: %v", after, cur, body)
	}
	_, body = e.call("GET", "/v1/trust-bundle/chain?after="+itoa(cur), "gw-token", nil, "", 200)
	if links, _ := body["bundles"].([]any); len(links) != 0 {
		t.Fatalf("chain after the version in force: %v", body)
	}
	_, body = e.call("GET", "/v1/trust-bundle/chain?after=x", "gw-token", nil, "", 400)
	wantCode(t, body, fencegate.CodeInvalidRequest)
	// after given twice: refused, not read as its first value.
	_, body = e.call("GET", "/v1/trust-bundle/chain?after="+itoa(after)+"&after=1", "gw-token", nil, "", 400)
	wantCode(t, body, fencegate.CodeInvalidRequest)
	_, body = e.call("GET", "/v1/trust-bundle/chain?after=1", tokA, nil, "", 403)
	wantCode(t, body, fencegate.CodeForbidden)
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
