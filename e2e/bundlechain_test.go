package e2e

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// TestAReplicaRefusesAForgedBundleFromAnImpostorAtItsRegistryURL: the
// address a replica's registryURL names is answered by an impostor that
// passes every call on to the real registry but answers GET
// /v1/trust-bundle with a bundle of its own (a higher version, its key
// under the registry's kid), signed by its own key. The replica keeps its
// bundle (version, keys, file), logs the refusal once, refuses a grant and
// proof the impostor signs (GRANT_INVALID, nothing moved), and goes on
// accepting the registry's grants.
func TestAReplicaRefusesAForgedBundleFromAnImpostorAtItsRegistryURL(t *testing.T) {
	regDir := t.TempDir()
	reg := startGateway(t, "dev", "--data-dir", regDir, "--identity", "worker-a=token-a",
		"--gateway", "replica=replica-token", "--admin-token", "ops-token")

	doc, sig, impostor := prooftest.Impostor(t, "dev-1", 1, 9, proofs.Revocations{})
	target, _ := url.Parse(reg.base)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var served atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/trust-bundle" {
			served.Add(1)
			w.Header().Set(fencegate.BundleSignatureHeader, sig)
			_, _ = w.Write(doc)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()

	cfg, bundle := pullingReplica(t, regDir, srv.URL, "50ms")
	onDisk, _ := os.ReadFile(bundle)
	rep := startGateway(t, "serve", "--config", cfg)
	for deadline := time.Now().Add(10 * time.Second); served.Load() < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the replica never fetched the bundle (%d):\n%s", served.Load(), rep.logs.String())
		}
	}
	st := rep.do(t, "GET", "/v1/admin/state", "rep-ops", nil, "")
	if st.num("trustBundleVersion") != 1 || !strings.Contains(string(st.body), `"keyIds":["dev-1"]`) {
		t.Fatalf("the replica's bundle after the forged one: %s", st.body)
	}
	if now, _ := os.ReadFile(bundle); !bytes.Equal(now, onDisk) {
		t.Fatal("the forged bundle was written to the replica's bundle file")
	}
	if n := strings.Count(rep.logs.String(), "no signature verifies under a key of the bundle in force"); n != 1 {
		t.Fatalf("the refusal was logged %d times, want once:\n%s", n, rep.logs.String())
	}

	a := reg.acquire(t, "token-a", "local/chain/1", "a-1", "chain", 60000)
	if r := rep.put(t, "token-a", a, "local/chain/1", 1, "one"); r.status != http.StatusOK {
		t.Fatalf("the registry's grant at the replica: %d %s", r.status, r.body)
	}
	before := string(rep.do(t, "GET", "/v1/resources/local/chain/1", "token-a", nil, "").body)
	var g fencegate.Grant
	prooftest.PayloadOf(t, a.grant, &g)
	g.FenceToken += 100
	grant, digest, err := impostor.SignGrant(g)
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, rep.put(t, "token-a", lease{grant: grant, status: heldProof(t, impostor, g, digest)}, "local/chain/1", 1, "forged"),
		http.StatusUnauthorized, "GRANT_INVALID")
	if after := string(rep.do(t, "GET", "/v1/resources/local/chain/1", "token-a", nil, "").body); after != before {
		t.Fatalf("the forged write moved the resource: %s -> %s", before, after)
	}
	if r := rep.put(t, "token-a", a, "local/chain/1", 2, "two"); r.status != http.StatusOK {
		t.Fatalf("the registry's grant after the forged one: %d %s", r.status, r.body)
	}
}
