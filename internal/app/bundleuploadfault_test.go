package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/proofs"
)

// uploadRegistry is a registry whose trust bundle (and its signature file)
// lies in a directory of its own (dir), served over HTTP: call asks it as
// a token's identity ("token-admin", "token-gw", "token-a"), served is what
// a replica is answered (the bundle, its signature, the chain after 1).
func uploadRegistry(t *testing.T) (a *App, dir string, call func(method, path, token, body string) (*http.Response, string), served func() [3]string) {
	t.Helper()
	cfg := config.Dev()
	cfg.DataDir = t.TempDir()
	dir = filepath.Join(cfg.DataDir, "trust")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg.TrustBundle = filepath.Join(dir, "trust-bundle.json")
	cfg.Identities = []config.Identity{{Name: "worker-a", Token: "token-a"}}
	cfg.Admins = []config.Identity{{Name: "admin", Token: "token-admin"}}
	cfg.Gateways = []config.Identity{{Name: "replica", Token: "token-gw"}}
	a, err := Build(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	a.ready.Store(true)
	srv := httptest.NewServer(a.handler)
	t.Cleanup(srv.Close)
	call = func(method, path, token, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp, string(raw)
	}
	served = func() [3]string {
		t.Helper()
		resp, doc := call("GET", "/v1/trust-bundle", "token-gw", "")
		_, chain := call("GET", "/v1/trust-bundle/chain?after=1", "token-gw", "")
		return [3]string{doc, resp.Header.Get(fencegate.BundleSignatureHeader), chain}
	}
	return a, dir, call, served
}

// problem is a problem+json answer's members a test checks.
type problem struct {
	Type   string         `json:"type"`
	Status int            `json:"status"`
	Code   fencegate.Code `json:"code"`
	Detail string         `json:"detail"`
}

// Rule: an operator's PUT /v1/admin/trust-bundle at the registry that
// cannot be persisted (the bundle's directory, where its signature file
// lies too, is gone) is answered as problem+json with the stable code
// INTERNAL (500), and leaves the bundle served to replicas, its signature
// and the chain as they were; once the directory is back the same upload
// is taken.
func TestAnUploadThatCannotBePersistedIsAProblemAndChangesNothing(t *testing.T) {
	a, dir, call, served := uploadRegistry(t)
	if _, err := a.auth.RotateKey(context.Background()); err != nil { // a chain to answer: 1 to 2
		t.Fatal(err)
	}
	before := served()
	if before[1] == "" || !strings.Contains(before[2], `"version":2`) {
		t.Fatalf("before the upload: %q", before)
	}
	cur := a.auth.Verifier().Bundle()
	up, err := proofs.NewRevokingBundle(cur.Version()+1, proofs.Revocations{Epochs: []uint64{9}}, cur.Keys()...)
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := up.Marshal()

	if err := os.Rename(dir, dir+".away"); err != nil {
		t.Fatal(err)
	}
	resp, body := call("PUT", "/v1/admin/trust-bundle", "token-admin", string(doc))
	if err := os.Rename(dir+".away", dir); err != nil {
		t.Fatal(err)
	}
	var p problem
	if err := json.Unmarshal([]byte(body), &p); err != nil || resp.StatusCode != http.StatusInternalServerError ||
		resp.Header.Get("Content-Type") != "application/problem+json" ||
		p.Code != fencegate.CodeInternal || p.Status != 500 || p.Type != "urn:fencegate:problem:internal" {
		t.Fatalf("upload with the bundle's directory gone: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if after := served(); after != before {
		t.Fatalf("a replica is answered otherwise after a failed upload:\n%q\n%q", before, after)
	}
	if a.auth.Verifier().Bundle().Version() != cur.Version() || a.auth.EpochRevoked(9) {
		t.Fatal("the upload that was not persisted is in force")
	}

	if resp, body := call("PUT", "/v1/admin/trust-bundle", "token-admin", string(doc)); resp.StatusCode != http.StatusOK {
		t.Fatalf("the upload once the directory is back: %d %s", resp.StatusCode, body)
	}
	if after := served(); after[0] != string(doc) || !strings.Contains(after[2], `"version":3`) {
		t.Fatalf("after the upload: %q", after)
	}
}
