package main

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/authority"
	fenceembedded "github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/registry/embedded"
)

// adminGateway serves the real admin routes (package handlers) over a
// signing authority and an in-process registry, with admin token "tok".
func adminGateway(t *testing.T) *harness {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := authority.Open(authority.Config{Signing: true, KeyID: "registry-1", IssuerEpoch: 1, PolicyGeneration: 1, Log: log,
		Files: authority.Files{State: filepath.Join(dir, "authority.json"), Bundle: filepath.Join(dir, "trust-bundle.json"), Key: filepath.Join(dir, "key")}})
	if err != nil {
		t.Fatal(err)
	}
	lb, err := embedded.Open(filepath.Join(dir, "registry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lb.Close() })
	reg, err := registry.New(registry.Config{Backend: lb, Authority: a})
	if err != nil {
		t.Fatal(err)
	}
	a.ServeFloors(reg)
	st, err := fenceembedded.Open(filepath.Join(dir, "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	gw, err := gateway.New(gateway.Config{Verifier: a.Verifier(), Store: st, Policy: a})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handlers.Router(&handlers.Server{Gateway: gw, Admin: a, Registry: reg, Log: log,
		Auth: handlers.NewBearerTokens(map[string]string{}), AdminAuth: handlers.NewBearerTokens(map[string]string{"tok": "ops"}),
		SpoolDir: t.TempDir()}))
	t.Cleanup(srv.Close)
	env = func(string) string { return "" }
	t.Cleanup(func() { env = os.Getenv })
	return &harness{t: t, dir: dir, global: []string{"--gateway", srv.URL, "--token", "tok", "--json"}}
}

// Rule: fencectl's admin verbs pass the gateway's rules for those routes:
// revoke-epoch and set-floor send their number as a canonical decimal, and
// revoke-epoch, rotate-key and bump-policy send no body (which the gateway
// refuses on them).
func TestAdminVerbsPassTheGatewaysRules(t *testing.T) {
	h := adminGateway(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rotate-key"}, `"issuerEpoch": 2`},
		{[]string{"revoke-epoch", "1"}, "\"revokedEpochs\": [\n    1\n  ]"},
		{[]string{"bump-policy"}, `"policyGeneration": 2`},
		{[]string{"set-floor", "100"}, `"highWater": 100`},
	} {
		code, out, errOut := h.run(tc.args...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Fatalf("%v: %d %s\n%s", tc.args, code, errOut, out)
		}
	}
}
