package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestGatewayWithoutRegistryTrustsOnlyItsBundleFile: a gateway replica with no
// registry of its own verifies grants from a separate registry through its
// trust bundle file. A rotated key is trusted there only once the operator
// installs the new bundle file, which the gateway reloads by itself.
func TestGatewayWithoutRegistryTrustsOnlyItsBundleFile(t *testing.T) {
	regDir := t.TempDir()
	reg := startGateway(t, "dev", "--data-dir", regDir, "--identity", "worker-a=token-a", "--admin-token", "ops-token")

	gwDir := t.TempDir()
	bundle := filepath.Join(gwDir, "bundle.json")
	copyFile(t, filepath.Join(regDir, "trust-bundle.json"), bundle)
	cfg := filepath.Join(gwDir, "gw.yaml")
	yml := fmt.Sprintf(`dataDir: %s
trustBundle: %s
stores: {local: "local:"}
identities: [{name: worker-a, token: token-a}]
access: {rules: [{identity: worker-a, lease: [local]}]}
admins: [{name: ops, token: gw-ops}]
reconcile: {interval: 100ms, deadline: 15m, orphan: 2m}
`, filepath.Join(gwDir, "data"), bundle)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, "serve", "--config", cfg)

	a := reg.acquire(t, "token-a", "local/rep/1", "a-1", "rep", 60000)
	if r := gw.put(t, "token-a", a, "local/rep/1", 1, "one"); r.status != http.StatusOK {
		t.Fatalf("write at the replica: %d %s", r.status, r.body)
	}
	if r := reg.do(t, "POST", "/v1/admin/keys/rotate", "ops-token", nil, ""); r.status != 200 {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	a2 := reg.refresh(t, "token-a", a) // re-issued under the new key
	wantCode(t, gw.put(t, "token-a", a2, "local/rep/1", 2, "two"), http.StatusUnauthorized, "GRANT_INVALID")

	copyFile(t, filepath.Join(regDir, "trust-bundle.json"), bundle)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := gw.put(t, "token-a", a2, "local/rep/1", 2, "two")
		if r.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica never trusted the new bundle: %d %s", r.status, r.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st := gw.do(t, "GET", "/v1/admin/state", "gw-ops", nil, "")
	if st.num("trustBundleVersion") != 2 {
		t.Fatalf("replica state: %s", st.body)
	}
	// Rotation and floors are the registry's business; the replica says so.
	wantCode(t, gw.do(t, "POST", "/v1/admin/keys/rotate", "gw-ops", nil, ""), http.StatusNotImplemented, "UNSUPPORTED")
}

// pullingReplica writes the config of a replica of the dev registry whose
// data directory is regDir: its own copy of the registry's bundle file
// (returned), registryURL url (the registry, or something in front of it),
// a fetch every refresh, worker-a's token and an admin ops token rep-ops.
// It returns the config's path and the replica's bundle file.
func pullingReplica(t *testing.T, regDir, url, refresh string) (cfg, bundle string) {
	t.Helper()
	repDir := t.TempDir()
	bundle = filepath.Join(repDir, "bundle.json")
	copyFile(t, filepath.Join(regDir, "trust-bundle.json"), bundle)
	cfg = filepath.Join(repDir, "gw.yaml")
	yml := fmt.Sprintf(`dataDir: %s
trustBundle: %s
registryURL: %s
registryCredential: {name: replica, token: replica-token}
bundleRefresh: %s
stores: {local: "local:"}
identities: [{name: worker-a, token: token-a}]
access: {rules: [{identity: worker-a, lease: [local]}]}
admins: [{name: ops, token: rep-ops}]
`, filepath.Join(repDir, "data"), bundle, url, refresh)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, bundle
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

// TestReplicaInQueryModeAsksTheRemoteRegistry: a registry-less replica in
// query mode asks the registry over HTTP for each grant's status and checks
// the signed answer, so a release at the registry is refused at once.
func TestReplicaInQueryModeAsksTheRemoteRegistry(t *testing.T) {
	regDir := t.TempDir()
	reg := startGateway(t, "dev", "--data-dir", regDir, "--identity", "worker-a=token-a", "--gateway", "replica=replica-token",
		"--admin-token", "ops-token")
	gwDir := t.TempDir()
	cfg := filepath.Join(gwDir, "gw.yaml")
	yml := fmt.Sprintf(`dataDir: %s
trustBundle: %s
statusMode: query
registryURL: %s
registryCredential: {name: replica, token: replica-token}
stores: {local: "local:"}
identities: [{name: worker-a, token: token-a}]
access: {rules: [{identity: worker-a, lease: [local]}]}
reconcile: {interval: 100ms, deadline: 15m, orphan: 2m}
`, filepath.Join(gwDir, "data"), filepath.Join(regDir, "trust-bundle.json"), reg.base)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, "serve", "--config", cfg)
	a := reg.acquire(t, "token-a", "local/q/2", "a-1", "q", 60000)
	hdr := map[string]string{"Fence-Grant": a.grant, "Fence-Segment": "1"}
	if r := gw.do(t, "PUT", "/v1/objects/local/q/2", "token-a", hdr, "v1"); r.status != http.StatusOK {
		t.Fatalf("query-mode write at the replica: %d %s", r.status, r.body)
	}
	// A key rotation does not strand the grant in flight: the registry attests
	// its status by digest, whatever epoch signs new grants.
	if r := reg.do(t, "POST", "/v1/admin/keys/rotate", "ops-token", nil, ""); r.status != 200 {
		t.Fatalf("rotate: %d %s", r.status, r.body)
	}
	hdr["Fence-Segment"] = "2"
	deadline := time.Now().Add(10 * time.Second)
	for { // the replica trusts the registry's new key once it reloaded the shared bundle file
		r := gw.do(t, "PUT", "/v1/objects/local/q/2", "token-a", hdr, "v2")
		if r.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) || r.str("code") != "STATUS_INVALID" {
			t.Fatalf("old-epoch grant after rotation: %d %s", r.status, r.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	reg.do(t, "DELETE", "/v1/leases/"+a.id, "token-a", nil, "")
	hdr["Fence-Segment"] = "3"
	wantCode(t, gw.do(t, "PUT", "/v1/objects/local/q/2", "token-a", hdr, "v3"), http.StatusUnauthorized, "STATUS_INVALID")
}
