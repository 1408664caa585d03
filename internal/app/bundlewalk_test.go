package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// Rule: a replica that missed two changes at its registry (K1→K2, then
// epoch 1 revoked: v3 = {K2}, signed by K2 only) follows the registry's
// chain to v3: v2 verified under its v1, v3 under v2; then a grant under K2
// is admitted there and one under K1 is EPOCH_REVOKED.
func TestAReplicaTwoChangesBehindFollowsTheRegistrysChain(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	rep, logs := chainReplica(t, w, w.srv.URL, openAccess)
	underK1 := w.acquire("token-a", "local/reports/50", "r-1")
	if _, err := w.app.auth.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.app.auth.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	underK2 := w.acquire("token-b", "local/reports/51", "r-2")
	rep.pull(ctx, 0)
	if b := rep.auth.Verifier().Bundle(); b.Version() != 3 || !slices.Equal(b.KeyIDs(), w.app.auth.Verifier().Bundle().KeyIDs()) {
		t.Fatalf("after the pull: version %d keys %v\n%s", b.Version(), b.KeyIDs(), logs.String())
	}
	if code := precheck(t, rep, underK2); code != "" {
		t.Fatalf("a grant under K2: %s", code)
	}
	if code := precheck(t, rep, underK1); code != fencegate.CodeEpochRevoked {
		t.Fatalf("a grant under K1: %q, want EPOCH_REVOKED", code)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("a followed chain logged an error:\n%s", logs.String())
	}
}

// chainRewriter is a proxy to the registry at target whose chain answers
// pass through edit.
func chainRewriter(t *testing.T, target string, edit func([]fencegate.BundleLink) []fencegate.BundleLink) string {
	return registryProxy(t, target, nil, func(resp *http.Response) error {
		if resp.Request.URL.Path != "/v1/trust-bundle/chain" || resp.StatusCode != http.StatusOK {
			return nil
		}
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		var c fencegate.BundleChain
		if err := json.Unmarshal(raw, &c); err != nil {
			return err
		}
		c.Bundles = edit(c.Bundles)
		raw, _ = json.Marshal(c)
		resp.Body = io.NopCloser(strings.NewReader(string(raw)))
		resp.ContentLength = int64(len(raw))
		resp.Header.Del("Content-Length")
		return nil
	})
}

// Rule: a chain whose middle step is forged (an impostor's v3, its own key
// under the registry's kid, signed by it) is walked up to the step before
// it and no further: the replica installs v2, refuses v3 and the rest,
// trusts none of the impostor's keys, and applies what the registry's
// current bundle revokes (K1's epoch) as it would with no chain.
func TestAForgedStepStopsTheChainWalkThere(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	var forged fencegate.BundleLink
	url := chainRewriter(t, w.srv.URL, func(links []fencegate.BundleLink) []fencegate.BundleLink {
		for i := range links {
			if links[i].Version == forged.Version {
				links[i] = forged
			}
		}
		return links
	})
	rep, logs := chainReplica(t, w, url, nil) // at v1
	for range 2 {
		if _, err := w.app.auth.RotateKey(ctx); err != nil {
			t.Fatal(err)
		}
	}
	kid3 := w.app.auth.Signer().KeyID()
	if _, err := w.app.auth.RetireEpoch(ctx, 1); err != nil { // v4 = {K2, K3}, signed by K3
		t.Fatal(err)
	}
	doc, sig, _ := prooftest.Impostor(t, kid3, 3, 3, proofs.Revocations{})
	forged = fencegate.BundleLink{Version: 3, Bundle: string(doc), Signature: sig}
	rep.pull(ctx, 0)
	b := rep.auth.Verifier().Bundle()
	if b.Version() != 2 {
		t.Fatalf("after the walk: version %d keys %v, want 2\n%s", b.Version(), b.KeyIDs(), logs.String())
	}
	if !rep.auth.EpochRevoked(1) || rep.auth.EpochRevoked(2) {
		t.Fatalf("epoch 1 revoked %v, epoch 2 revoked %v; want the registry's revocation of 1 applied", rep.auth.EpochRevoked(1), rep.auth.EpochRevoked(2))
	}
	if slices.Contains(b.KeyIDs(), kid3) {
		t.Fatalf("the impostor's key %s is trusted: %v", kid3, b.KeyIDs())
	}
	if !strings.Contains(logs.String(), "stopped at version 3") {
		t.Fatalf("the refusal does not name the step:\n%s", logs.String())
	}
}

// Rule: a replica further behind than the registry keeps (more than
// authority.ChainLength bundles published since its version) is answered
// NOT_FOUND by the chain route and keeps the narrowing: the registry's
// revocation of K1's epoch applies there, its bundle stays v1.
func TestAReplicaBehindTheKeptChainKeepsTheNarrowing(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	rep, logs := chainReplica(t, w, w.srv.URL, nil)
	if _, err := w.app.auth.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.app.auth.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for range authority.ChainLength {
		if _, err := w.app.auth.RotateKey(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rep.pull(ctx, 0)
	if v := rep.auth.Verifier().Bundle().Version(); v != 1 || !rep.auth.EpochRevoked(1) {
		t.Fatalf("version %d, epoch 1 revoked %v\n%s", v, rep.auth.EpochRevoked(1), logs.String())
	}
	if !strings.Contains(logs.String(), "no unbroken chain from version 1") || !strings.Contains(logs.String(), "its revocations applied here") {
		t.Fatalf("the log does not say why:\n%s", logs.String())
	}
}
