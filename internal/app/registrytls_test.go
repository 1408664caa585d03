package app

import (
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
)

// Rule: a replica's registry client verifies an https registry's
// certificate: against the system roots by default, so a certificate of
// another CA is refused, and against registryCA when it is set.
func TestRegistryClientVerifiesTheRegistryCertificate(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"version":1}`))
	}))
	defer srv.Close()

	q, err := newRemoteQuerier(srv.URL, "gw-token", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.FetchBundle(context.Background()); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("bundle fetched from a registry whose certificate no trusted CA signed: %v", err)
	}

	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	q, err = newRemoteQuerier(srv.URL, "gw-token", nil, roots)
	if err != nil {
		t.Fatal(err)
	}
	if b, _, err := q.FetchBundle(context.Background()); err != nil || string(b) != `{"version":1}` {
		t.Fatalf("bundle from a registry registryCA vouches for: %q, %v", b, err)
	}
}

// Rule: the registry client follows no redirect, so an answer cannot send
// the gateway credential on to another address (a plain http one, say).
func TestRegistryClientFollowsNoRedirect(t *testing.T) {
	var leaked bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked = r.Header.Get("Authorization") != ""
		_, _ = w.Write([]byte(`{"version":1}`))
	}))
	defer elsewhere.Close()
	srv := httptest.NewServer(http.RedirectHandler(elsewhere.URL+"/v1/trust-bundle", http.StatusFound))
	defer srv.Close()
	q, err := newRemoteQuerier(srv.URL, "gw-token", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := q.FetchBundle(context.Background()); err == nil || leaked {
		t.Fatalf("redirect followed (credential sent on: %v): %v", leaked, err)
	}
}

// Rule: a replica let onto a plain http registryURL by registryInsecureHTTP
// says so at every start; a loopback one does not.
func TestInsecureRegistryHTTPIsLoggedAtStart(t *testing.T) {
	reg, bundleFile := buildDevRegistry(t)
	reg.Close()
	for url, warn := range map[string]bool{"http://registry.invalid:8080": true, "http://127.0.0.1:1": false} {
		a, logs := buildReplica(t, bundleFile, url, true)
		a.Close()
		if got := strings.Contains(logs.String(), "level=WARN msg=\"registryURL is plain http"); got != warn {
			t.Errorf("%s: warned %v, want %v:\n%s", url, got, warn, logs.String())
		}
	}
}

// Rule: a replica whose registry serves a trust bundle older than the one
// in force here (a registry restored, or another one behind the URL)
// ignores it and says so, once until something changes: keys the registry
// rotated to since are not trusted until its version passes this one.
func TestAnOlderBundleFromTheRegistryIsIgnoredAndLogged(t *testing.T) {
	reg, bundleFile := buildDevRegistry(t)
	defer reg.Close()
	old, err := os.ReadFile(bundleFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.auth.RotateKey(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(old) }))
	defer srv.Close()
	a, logs := buildReplica(t, bundleFile, srv.URL, false) // bundleFile: the rotated bundle, a version above the one served
	defer a.Close()
	held := a.auth.Verifier().Bundle().Version()
	a.pull(context.Background(), 0)
	a.pull(context.Background(), 0)
	if got := a.auth.Verifier().Bundle().Version(); got != held {
		t.Fatalf("the older bundle was installed: version %d, was %d", got, held)
	}
	if n := strings.Count(logs.String(), "older than the one in force here"); n != 1 {
		t.Fatalf("the older bundle was logged %d times, want once:\n%s", n, logs.String())
	}
}

// buildReplica builds a registry-less replica trusting bundleFile and
// pulling from registryURL (insecure: registryInsecureHTTP), its log kept.
func buildReplica(t *testing.T, bundleFile, registryURL string, insecure bool) (*App, *bytes.Buffer) {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.Identities = []config.Identity{{Name: "w", Token: "t"}}
	cfg.TrustBundle = bundleFile
	cfg.RegistryURL, cfg.RegistryInsecureHTTP = registryURL, insecure
	cfg.RegistryCredential = config.Identity{Name: "gw", Token: "g"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	a, err := Build(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return a, logs
}

// buildDevRegistry builds a `gateway dev` app (its registry in process) and
// returns it with the path of the trust bundle it writes.
func buildDevRegistry(t *testing.T) (*App, string) {
	t.Helper()
	dev := config.Dev()
	dev.DataDir = t.TempDir()
	dev.Identities = []config.Identity{{Name: "w", Token: "t"}}
	reg, err := Build(context.Background(), dev, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return reg, filepath.Join(dev.DataDir, "trust-bundle.json")
}
