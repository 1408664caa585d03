package e2e

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// stolenSigner is what a thief of the registry's key file holds.
func stolenSigner(t *testing.T, keyFile, kid string) *proofs.Signer {
	t.Helper()
	b, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := proofs.NewSigner(ed25519.NewKeyFromSeed(seed), kid, proofs.AlgEdDSA)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// heldProof is a fresh HELD status proof for the grant with digest, signed by s.
func heldProof(t *testing.T, s *proofs.Signer, g fencegate.Grant, digest string) string {
	t.Helper()
	now := time.Now()
	tok, err := s.SignStatus(fencegate.Status{Schema: fencegate.StatusSchema, GrantDigest: digest, Resource: g.Resource,
		Lease: g.Lease, FenceToken: g.FenceToken, State: fencegate.StateHeld, Revision: g.BackendRevision,
		IssuerEpoch: g.IssuerEpoch, IssuedAtMs: now.UnixMilli(), ExpiresAtMs: now.Add(5 * time.Second).UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestRevocationReachesARegistrylessReplicaAndNoAttestTrickYieldsAHeldProof:
// a registry process and a proof-mode replica without a registry. The
// operator revokes epoch 1 at the registry; the registry signs no HELD proof
// for epoch-1 grants from then on, whatever an attest request claims; the
// replica, given the new bundle through its controlled path, refuses the
// epoch's grants at once (before the last HELD proof's life is over), also
// those a thief mints with the stolen key. Every refusal leaves the lease and
// the resource as they were.
func TestRevocationReachesARegistrylessReplicaAndNoAttestTrickYieldsAHeldProof(t *testing.T) {
	regDir := t.TempDir()
	reg := startGateway(t, "dev", "--data-dir", regDir, "--identity", "worker-a=token-a", "--identity", "worker-b=token-b",
		"--gateway", "replica=replica-token", "--admin-token", "ops-token")
	repDir := t.TempDir()
	bundle := filepath.Join(repDir, "bundle.json")
	copyFile(t, filepath.Join(regDir, "trust-bundle.json"), bundle)
	cfg := filepath.Join(repDir, "gw.yaml")
	yml := fmt.Sprintf(`dataDir: %s
trustBundle: %s
stores: {local: "local:"}
identities: [{name: worker-a, token: token-a}, {name: worker-b, token: token-b}]
access: {rules: [{identity: worker-a, lease: [local]}, {identity: worker-b, lease: [local]}]}
admins: [{name: ops, token: rep-ops}]
`, filepath.Join(repDir, "data"), bundle)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := startGateway(t, "serve", "--config", cfg)

	a := reg.acquire(t, "token-a", "local/rev/1", "a-1", "rev", 60000)
	if r := rep.put(t, "token-a", a, "local/rev/1", 1, "one"); r.status != http.StatusOK {
		t.Fatalf("write at the replica: %d %s", r.status, r.body)
	}
	var g1 fencegate.Grant
	d1 := proofs.GrantDigest(prooftest.PayloadOf(t, a.grant, &g1))
	thief := stolenSigner(t, filepath.Join(regDir, "registry-signing-key"), "dev-1")

	rev := reg.do(t, "POST", "/v1/admin/epochs/1/revoke", "ops-token", nil, "")
	if rev.status != http.StatusOK || rev.num("issuerEpoch") != 2 || !strings.Contains(string(rev.body), `"revokedEpochs":[1]`) {
		t.Fatalf("revoke: %d %s", rev.status, rev.body)
	}
	a2 := reg.refresh(t, "token-a", a)
	if a2.fence != a.fence || prooftest.GrantOf(t, a2.grant).IssuerEpoch != 2 {
		t.Fatalf("re-issued grant: fence %d epoch %d", a2.fence, prooftest.GrantOf(t, a2.grant).IssuerEpoch)
	}
	var g2 fencegate.Grant
	d2 := proofs.GrantDigest(prooftest.PayloadOf(t, a2.grant, &g2))

	// The registry: no attest trick yields a HELD proof, and none changes the lease.
	leaseBefore := reg.do(t, "GET", "/v1/leases/"+a.id, "token-a", nil, "")
	attest := func(token, body string) answer {
		return reg.do(t, "POST", "/v1/leases/"+a.id+"/attest", token, map[string]string{"Content-Type": "application/json"}, body)
	}
	digest := func(d string, extra string) string { return fmt.Sprintf(`{"grantDigest":%q%s}`, d, extra) }
	for name, c := range map[string]struct {
		token, body string
		status      int
		code        string
	}{
		"no credential":                          {"", digest(d2, ""), http.StatusUnauthorized, "UNAUTHENTICATED"},
		"a workload that is not the owner":       {"token-b", digest(d2, ""), http.StatusForbidden, "OWNER_MISMATCH"},
		"the revoked grant claimed as epoch 2":   {"token-a", digest(d1, `,"issuerEpoch":2`), http.StatusUnauthorized, "STATUS_INVALID"},
		"a gateway claiming epoch 2":             {"replica-token", digest(d1, `,"issuerEpoch":2`), http.StatusUnauthorized, "STATUS_INVALID"},
		"a digest the lease never had":           {"replica-token", digest("sha256:"+strings.Repeat("ab", 32), ""), http.StatusUnauthorized, "STATUS_INVALID"},
		"the current digest under another fence": {"token-a", digest(d2, `,"fenceToken":99`), http.StatusUnauthorized, "STATUS_INVALID"},
	} {
		r := attest(c.token, c.body)
		if r.status != c.status || r.str("code") != c.code {
			t.Errorf("%s: want %d %s, got %d %s", name, c.status, c.code, r.status, r.body)
		}
	}
	// The revoked grant by its own digest is stated REVOKED, never HELD.
	r := attest("replica-token", digest(d1, ""))
	var st fencegate.Status
	if r.status != http.StatusOK || func() bool {
		prooftest.PayloadOf(t, r.str("statusProof"), &st)
		return st.State != fencegate.StateRevoked
	}() {
		t.Fatalf("attest of the revoked grant: %d %s (%s)", r.status, r.body, st.State)
	}
	revokedProof := r.str("statusProof")
	if r := attest("replica-token", digest(d2, "")); r.status != http.StatusOK {
		t.Fatalf("gateway attest of the current grant: %d %s", r.status, r.body)
	} else if prooftest.PayloadOf(t, r.str("statusProof"), &st); st.State != fencegate.StateHeld || st.GrantDigest != d2 {
		t.Fatalf("current grant stated %s for %s", st.State, st.GrantDigest)
	}
	if after := reg.do(t, "GET", "/v1/leases/"+a.id, "token-a", nil, ""); after.num("fenceToken") != leaseBefore.num("fenceToken") ||
		after.str("state") != "HELD" || after.str("grant") != leaseBefore.str("grant") {
		t.Fatalf("attests changed the lease: %s -> %s", leaseBefore.body, after.body)
	}

	// The replica gets the new bundle through its controlled path.
	tb := reg.do(t, "GET", "/v1/admin/trust-bundle", "ops-token", nil, "")
	if put := rep.do(t, "PUT", "/v1/admin/trust-bundle", "rep-ops", nil, string(tb.body)); put.status != http.StatusOK ||
		put.num("trustBundleVersion") != 2 || !strings.Contains(string(put.body), `"revokedEpochs":[1]`) {
		t.Fatalf("bundle at the replica: %d %s", put.status, put.body)
	}
	resource := func() string { return string(rep.do(t, "GET", "/v1/resources/local/rev/1", "token-a", nil, "").body) }
	before := resource()
	forged := g1
	forged.Lease, forged.FenceToken, forged.RequestID = "lease-forged", a.fence+100, "forged"
	forgedTok, forgedDigest, err := thief.SignGrant(forged)
	if err != nil {
		t.Fatal(err)
	}
	claims2 := g1
	claims2.IssuerEpoch = 2
	claims2Tok, claims2Digest, err := thief.SignGrant(claims2)
	if err != nil {
		t.Fatal(err)
	}
	for name, l := range map[string]lease{
		"the epoch-1 grant with its own, still fresh proof":   a,
		"the epoch-1 grant with a thief's HELD proof":         {grant: a.grant, status: heldProof(t, thief, g1, d1)},
		"the epoch-1 grant with the registry's REVOKED proof": {grant: a.grant, status: revokedProof},
		"a new grant minted with the stolen key":              {grant: forgedTok, status: heldProof(t, thief, forged, forgedDigest)},
		"a stolen-key grant claiming epoch 2":                 {grant: claims2Tok, status: heldProof(t, thief, claims2, claims2Digest)},
		"the current grant with the thief's proof for it":     {grant: a2.grant, status: heldProof(t, thief, g2, d2)},
	} {
		r := rep.put(t, "token-a", l, "local/rev/1", 2, "stale")
		if r.status != http.StatusUnauthorized || (r.str("code") != "EPOCH_REVOKED" && r.str("code") != "STATUS_INVALID") {
			t.Errorf("%s: want 401 EPOCH_REVOKED, got %d %s", name, r.status, r.body)
		}
		if name != "the current grant with the thief's proof for it" && r.str("code") != "EPOCH_REVOKED" {
			t.Errorf("%s: want EPOCH_REVOKED, got %s", name, r.body)
		}
		if got := resource(); got != before {
			t.Fatalf("%s: refused write moved the resource: %s -> %s", name, before, got)
		}
	}
	if r := rep.put(t, "token-a", a2, "local/rev/1", 2, "two"); r.status != http.StatusOK {
		t.Fatalf("re-issued grant at the replica: %d %s", r.status, r.body)
	}

	// A restart of the replica keeps the revocation, and a bundle that
	// trusts epoch 1 again is refused there.
	rep.stop(t)
	rep = startGateway(t, "serve", "--config", cfg)
	wantCode(t, rep.put(t, "token-a", lease{grant: a.grant, status: heldProof(t, thief, g1, d1)}, "local/rev/1", 3, "x"),
		http.StatusUnauthorized, "EPOCH_REVOKED")
	old, err := os.ReadFile(filepath.Join(regDir, "trust-bundle.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(old, &doc); err != nil {
		t.Fatal(err)
	}
	keys := doc["keys"].([]any)
	doc = map[string]any{"version": 4, "keys": append(keys, thiefKey(t, thief))}
	lifting, _ := json.Marshal(doc)
	wantCode(t, rep.do(t, "PUT", "/v1/admin/trust-bundle", "rep-ops", nil, string(lifting)), http.StatusBadRequest, "INVALID_REQUEST")
	if st := rep.do(t, "GET", "/v1/admin/state", "rep-ops", nil, ""); st.num("trustBundleVersion") != 2 {
		t.Fatalf("a refused bundle was installed: %s", st.body)
	}
}

// thiefKey is the bundle entry of the stolen epoch-1 key.
func thiefKey(t *testing.T, s *proofs.Signer) any {
	t.Helper()
	b, err := proofs.NewBundle(1, s.BundleKey(1))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := b.Marshal()
	var doc struct {
		Keys []any `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Keys[0]
}

// TestReplicaWithARegistryURLFetchesTheRevocationByItself: a proof-mode
// replica configured with the registry's URL and a gateway identity fetches
// the registry's trust bundle every bundleRefresh; a revocation at the
// registry reaches it with no operator step, well within one status-proof
// life (5 s), after which a thief's proofs for the revoked epoch are refused.
func TestReplicaWithARegistryURLFetchesTheRevocationByItself(t *testing.T) {
	regDir := t.TempDir()
	reg := startGateway(t, "dev", "--data-dir", regDir, "--identity", "worker-a=token-a",
		"--gateway", "replica=replica-token", "--admin-token", "ops-token")
	wantCode(t, reg.do(t, "GET", "/v1/trust-bundle", "token-a", nil, ""), http.StatusForbidden, "FORBIDDEN")
	wantCode(t, reg.do(t, "GET", "/v1/trust-bundle", "", nil, ""), http.StatusUnauthorized, "UNAUTHENTICATED")

	cfg, bundle := pullingReplica(t, regDir, reg.base, "100ms")
	rep := startGateway(t, "serve", "--config", cfg)
	a := reg.acquire(t, "token-a", "local/auto/1", "a-1", "auto", 60000)
	if r := rep.put(t, "token-a", a, "local/auto/1", 1, "one"); r.status != http.StatusOK {
		t.Fatalf("write at the replica: %d %s", r.status, r.body)
	}
	var g1 fencegate.Grant
	d1 := proofs.GrantDigest(prooftest.PayloadOf(t, a.grant, &g1))
	thief := stolenSigner(t, filepath.Join(regDir, "registry-signing-key"), "dev-1")

	revokedAt := time.Now()
	if r := reg.do(t, "POST", "/v1/admin/epochs/1/revoke", "ops-token", nil, ""); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	for !strings.Contains(string(rep.do(t, "GET", "/v1/admin/state", "rep-ops", nil, "").body), `"revokedEpochs":[1]`) {
		if time.Since(revokedAt) > 30*time.Second {
			t.Fatalf("the replica never fetched the revocation:\n%s", rep.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(revokedAt)
	t.Logf("revocation reached the replica %s after it was made", took.Round(time.Millisecond))
	if took >= fencegate.DefaultStatusLife {
		t.Fatalf("revocation took %s, not within one proof life (%s)", took, fencegate.DefaultStatusLife)
	}
	before := string(rep.do(t, "GET", "/v1/resources/local/auto/1", "token-a", nil, "").body)
	wantCode(t, rep.put(t, "token-a", lease{grant: a.grant, status: heldProof(t, thief, g1, d1)}, "local/auto/1", 2, "stale"),
		http.StatusUnauthorized, "EPOCH_REVOKED")
	if after := string(rep.do(t, "GET", "/v1/resources/local/auto/1", "token-a", nil, "").body); after != before {
		t.Fatalf("refused write moved the resource: %s -> %s", before, after)
	}
	a2 := reg.refresh(t, "token-a", a)
	if r := rep.put(t, "token-a", a2, "local/auto/1", 2, "two"); r.status != http.StatusOK {
		t.Fatalf("re-issued grant at the replica: %d %s", r.status, r.body)
	}
	if onDisk, err := proofs.LoadBundle(bundle); err != nil || !onDisk.EpochRevoked(1) {
		t.Fatalf("fetched bundle not persisted as the replica's bundle file: %v", err)
	}
}
