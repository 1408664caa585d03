package app

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// chainReplica builds a registry-less replica of w's registry: its own copy
// of the registry's bundle file as it is now, pulling from url as the
// registry's gateway identity; mod adjusts the config. Its log is kept.
func chainReplica(t *testing.T, w *s3World, url string, mod func(*config.Config)) (*App, *bytes.Buffer) {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.Identities = []config.Identity{{Name: "w", Token: "t"}}
	cfg.TrustBundle = filepath.Join(cfg.DataDir, "bundle.json")
	data, err := os.ReadFile(filepath.Join(w.app.cfg.DataDir, "trust-bundle.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.TrustBundle, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.RegistryURL = url
	cfg.RegistryCredential = config.Identity{Name: "replica", Token: "token-gw"}
	if mod != nil {
		mod(&cfg)
	}
	logs := &bytes.Buffer{}
	a, err := Build(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return a, logs
}

// Rule: a key rotation at the registry reaches a replica through the
// registry's own answer: the bundle is signed by the outgoing key, which
// the replica's bundle trusts, and a grant under the new key verifies there.
func TestARotationThroughTheRegistryIsAcceptedAlongTheChain(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	rep, logs := chainReplica(t, w, w.srv.URL, nil)
	if _, err := w.app.auth.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	rep.pull(ctx, 0)
	b := rep.auth.Verifier().Bundle()
	if b.Version() != 2 || !slices.Contains(b.KeyIDs(), w.app.auth.Signer().KeyID()) {
		t.Fatalf("after the rotation: version %d keys %v\n%s", b.Version(), b.KeyIDs(), logs.String())
	}
	held := w.acquire("token-a", "local/reports/30", "r-1")
	if g, err := rep.auth.Verifier().VerifyGrant(held.Grant); err != nil || g.IssuerEpoch != 2 {
		t.Fatalf("a grant under the new key at the replica: %+v %v", g, err)
	}
}

// Rule: a registryURL answering a bundle of keys of its own, signed by its
// own key (an impostor), is refused: the replica keeps its bundle (version
// and keys), says so once, and a grant the impostor signs is GRANT_INVALID.
func TestAnImpostorsBundleIsRefusedAndSoAreItsGrants(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	real := w.acquire("token-a", "local/reports/31", "r-1")
	kid := w.app.auth.Signer().KeyID()
	doc, sig, impostor := prooftest.Impostor(t, kid, 1, 9, proofs.Revocations{}) // the registry's kid, another key
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set(fencegate.BundleSignatureHeader, sig)
		_, _ = rw.Write(doc)
	}))
	defer srv.Close()
	rep, logs := chainReplica(t, w, srv.URL, nil)
	before, _ := rep.auth.Verifier().Bundle().Marshal()
	rep.pull(ctx, 0)
	rep.pull(ctx, 0)
	after, _ := rep.auth.Verifier().Bundle().Marshal()
	if !bytes.Equal(before, after) {
		t.Fatalf("the impostor's bundle changed the replica's:\n%s\n%s", before, after)
	}
	if n := strings.Count(logs.String(), "no signature verifies under a key of the bundle in force"); n != 1 {
		t.Fatalf("the refusal was logged %d times, want once:\n%s", n, logs.String())
	}
	token, _, err := impostor.SignGrant(prooftest.GrantOf(t, real.Grant))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rep.auth.Verifier().VerifyGrant(token); fencegate.ErrorCode(err) != fencegate.CodeGrantInvalid {
		t.Fatalf("the impostor's grant: %v, want GRANT_INVALID", err)
	}
	if _, err := rep.auth.Verifier().VerifyGrant(real.Grant); err != nil {
		t.Fatalf("the registry's grant: %v", err)
	}
}

// Rule: a bundle answered without a signature (a registry too old to sign,
// or one stripped on the way) is refused by default, the bundle in force
// kept; with registryBundleUnsigned: accept (warned at start) it is
// installed.
func TestAnUnsignedBundleIsRefusedByDefaultAndAcceptedWithTheSwitch(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	stripped := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		doc, _ := w.app.auth.TrustBundle(r.Context())
		_, _ = rw.Write(doc)
	}))
	defer stripped.Close()
	type replica struct {
		a    *App
		logs *bytes.Buffer
	}
	reps := map[bool]replica{}
	for _, accept := range []bool{false, true} {
		a, logs := chainReplica(t, w, stripped.URL, func(c *config.Config) {
			if accept {
				c.RegistryBundleUnsigned = "accept"
			}
		})
		if got := strings.Contains(logs.String(), "level=WARN msg=\"registryBundleUnsigned: accept"); got != accept {
			t.Fatalf("accept %v: warned at start %v:\n%s", accept, got, logs.String())
		}
		reps[accept] = replica{a, logs}
	}
	if _, err := w.app.auth.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	for accept, rep := range reps {
		rep.a.pull(ctx, 0)
		switch v := rep.a.auth.Verifier().Bundle().Version(); {
		case !accept && (v != 1 || !strings.Contains(rep.logs.String(), "carries no signature")):
			t.Fatalf("unsigned, by default: version %d\n%s", v, rep.logs.String())
		case accept && v != 2:
			t.Fatalf("unsigned, accepted: version %d\n%s", v, rep.logs.String())
		}
	}
}
