package e2e

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestComposeKitFencesAStaleWriterAcrossReplicas starts, as processes, the
// configuration deploy/compose/compose.yaml describes: a registry
// (deploy/compose/registry.yaml) on a durable Redis backend, two gateway
// replicas (deploy/compose/gateway.yaml, the file every compose replica
// mounts) sharing one Postgres fence store, and versitygw as the object
// store. Only addresses are substituted, with the flags the compose files'
// comments name. A worker leases at the registry and writes through replica
// one; after the lease passes to a second holder who writes through replica
// two, the first holder's next write at replica one is refused STALE_OWNER
// and the object keeps the new holder's bytes.
func TestComposeKitFencesAStaleWriterAcrossReplicas(t *testing.T) {
	pg := testenv.OwnPostgres(t)
	rd := testenv.OwnRedis(t, testenv.RedisDurable())
	s3 := testenv.OwnVersitygw(t)
	kit := filepath.Join("..", "deploy", "compose")
	env := []string{"FENCEGATE_WORKER_TOKEN=worker-token", "FENCEGATE_REPLICA_TOKEN=replica-token",
		"FENCEGATE_ADMIN_TOKEN=ops-token", "AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}

	trust := filepath.Join(t.TempDir(), "trust-bundle.json") // the compose volume "trust"
	reg := startGatewayEnv(t, env, "registry", "--config", filepath.Join(kit, "registry.yaml"),
		"--data-dir", t.TempDir(), "--trust-bundle", trust, "--metrics-addr", freePort(t), "--fence-store", pg.URL(),
		"--registry-backend", "redis://"+rd.Addr()+"?prefix=fencegate")
	store := "objects=s3://" + s3.Bucket + "/objects?endpoint=" + s3.Endpoint + "&region=" + s3.Region + "&pathStyle=true"
	replica := func() *gatewayProc {
		dir := t.TempDir()
		return startGatewayEnv(t, env, "serve", "--config", filepath.Join(kit, "gateway.yaml"),
			"--data-dir", dir, "--metrics-addr", freePort(t), "--fence-store", pg.URL(),
			"--registry-url", reg.base, "--trust-bundle", trust, "--store", store)
	}
	gw1, gw2 := replica(), replica()

	const res = "objects/kit/ledger"
	a := reg.acquire(t, "worker-token", res, "kit-a", "kit-op-a", 60000)
	if r := gw1.put(t, "worker-token", a, res, 1, "from-a"); r.status != http.StatusOK {
		t.Fatalf("first holder's write at replica one: %d %s", r.status, r.body)
	}
	if r := reg.do(t, "DELETE", "/v1/leases/"+a.id, "worker-token", nil, ""); r.status/100 != 2 {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	b := reg.acquire(t, "worker-token", res, "kit-b", "kit-op-b", 60000)
	if b.fence <= a.fence {
		t.Fatalf("second holder's fence %d not above %d", b.fence, a.fence)
	}
	if r := gw2.put(t, "worker-token", b, res, 1, "from-b"); r.status != http.StatusOK {
		t.Fatalf("second holder's write at replica two: %d %s", r.status, r.body)
	}
	wantCode(t, gw1.put(t, "worker-token", a, res, 2, "stale"), http.StatusConflict, "STALE_OWNER")
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := gw1.do(t, "GET", "/v1/objects/"+res, "worker-token", nil, "")
		if got.status == http.StatusOK && strings.Contains(string(got.body), "from-b") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("object after the refused stale write: %d %s", got.status, got.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
