package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/registry/redis/redistest"
)

// lossCase is one way of losing the registry's coordination state under a
// running gateway: args select the backend; snapshot (optional) runs before
// the unwritten fence is issued; lose loses the state and returns the
// gateway to talk to afterwards (the same one, or a restarted one).
type lossCase struct {
	name     string
	args     func(t *testing.T) []string
	snapshot func(t *testing.T)
	lose     func(t *testing.T, p *gatewayProc, start func(extra ...string) *gatewayProc) *gatewayProc
}

func lossCases() []lossCase {
	var (
		ownRedis *testenv.Redis
		ownEtcd  *testenv.Etcd
		rdb      string
		dump     redistest.Snap
		shared   *goredis.Client
		prefix   string
	)
	same := func(_ *testing.T, p *gatewayProc, _ func(...string) *gatewayProc) *gatewayProc { return p }
	return []lossCase{{
		name: "RedisKilledAndRestartedEmpty",
		args: func(t *testing.T) []string {
			ownRedis = testenv.OwnRedis(t)
			return []string{"--registry-backend", "redis://" + ownRedis.Addr(), "--allow-volatile-backend"}
		},
		lose: func(t *testing.T, p *gatewayProc, s func(...string) *gatewayProc) *gatewayProc {
			ownRedis.RestartEmpty() // kill -9, no persistence: every fence, floor and lease is gone
			return p
		},
	}, {
		name: "RedisRestoredFromAnOlderRDB",
		args: func(t *testing.T) []string {
			ownRedis = testenv.OwnRedis(t, testenv.RedisDurable())
			return []string{"--registry-backend", "redis://" + ownRedis.Addr()}
		},
		snapshot: func(t *testing.T) { rdb = ownRedis.Save() },
		lose: func(t *testing.T, p *gatewayProc, s func(...string) *gatewayProc) *gatewayProc {
			ownRedis.RestoreRDB(rdb)
			return p
		},
	}, {
		name: "RedisKeysRestoredFromAnOlderDUMP",
		args: func(t *testing.T) []string {
			addr := testenv.RedisAddr(t)
			prefix = testenv.RandomName("{fg-e2e-") + "}:"
			shared = goredis.NewClient(&goredis.Options{Addr: addr})
			t.Cleanup(func() {
				ctx := context.Background()
				if keys, err := shared.Keys(ctx, prefix+"*").Result(); err == nil && len(keys) > 0 {
					shared.Del(ctx, keys...)
				}
				_ = shared.Close()
			})
			return []string{"--registry-backend", "redis://" + addr + "?prefix=" + prefix, "--allow-volatile-backend"}
		},
		snapshot: func(t *testing.T) {
			var err error
			if dump, err = redistest.Snapshot(context.Background(), shared, prefix); err != nil || dump.Len() == 0 {
				t.Fatalf("snapshot: %v (%d keys)", err, dump.Len())
			}
		},
		lose: func(t *testing.T, p *gatewayProc, s func(...string) *gatewayProc) *gatewayProc {
			if err := dump.Restore(context.Background(), shared); err != nil {
				t.Fatal(err)
			}
			return p
		},
	}, {
		name: "EtcdRestoredFromAnOlderSnapshot",
		args: func(t *testing.T) []string {
			ownEtcd = testenv.OwnEtcd(t)
			return []string{"--registry-backend", "etcd://" + ownEtcd.Addr()}
		},
		snapshot: func(t *testing.T) { rdb = ownEtcd.Snapshot() },
		lose: func(t *testing.T, p *gatewayProc, s func(...string) *gatewayProc) *gatewayProc {
			ownEtcd.Restore(rdb)
			return p
		},
	}, {
		name: "BackendSwitchedFromEmbeddedToPostgres",
		args: func(t *testing.T) []string { return nil },
		lose: func(t *testing.T, p *gatewayProc, start func(...string) *gatewayProc) *gatewayProc {
			p.stop(t)
			return start("--registry-backend", testenv.PostgresURL(t))
		},
	}, {
		name: "NoLoss",
		args: func(t *testing.T) []string { return nil },
		lose: same,
	}}
}

// TestStateLossNeverLetsAVanishedOwnerWrite runs the sequence of issue 8
// against the built binary, for every way of losing the coordination state
// and in both status modes: A holds an unwritten fence, the state is lost, B
// acquires, A writes late. A is refused, before B's grant and after it; B is
// issued above A's fence and its writes are accepted; writes accepted from
// owners whose lease no longer exists: 0.
func TestStateLossNeverLetsAVanishedOwnerWrite(t *testing.T) {
	for _, mode := range []string{"proof", "query"} {
		for _, c := range lossCases() {
			t.Run(mode+"/"+c.name, func(t *testing.T) { runLossCase(t, mode, c) })
		}
	}
}

func runLossCase(t *testing.T, mode string, c lossCase) {
	dir := t.TempDir()
	conf := lossConfig(t, dir, "dev-1", "")
	base := append([]string{"dev", "--config", conf, "--data-dir", filepath.Join(dir, "data"), "--status-mode", mode,
		"--identity", "worker-a=token-a", "--identity", "worker-b=token-b", "--identity", "worker-w=token-w",
		"--admin-token", "ops-token"}, c.args(t)...)
	start := func(extra ...string) *gatewayProc {
		return startGateway(t, append(append([]string{}, base...), extra...)...)
	}
	p := start()
	const res = "local/ledger"

	// Two earlier owners wrote and left: the resource has accepted fences 1, 2.
	for i := range 2 {
		w := p.acquire(t, "token-w", res, fmt.Sprintf("w-%d", i), "close-books", 60000)
		if r := p.put(t, "token-w", w, res, 1, "W"); r.status != 200 {
			t.Fatalf("W%d: %d %s", i, r.status, r.body)
		}
		p.do(t, "DELETE", "/v1/leases/"+w.id, "token-w", nil, "")
	}
	if c.snapshot != nil {
		c.snapshot(t)
	}
	a := p.acquire(t, "token-a", res, "a-1", "close-books", 60000) // A holds fence 3 and has not written
	if a.fence != 3 {
		t.Fatalf("A's fence %d, want 3", a.fence)
	}

	p = c.lose(t, p, start)
	lost := c.name != "NoLoss"
	var vanished, vanishedAccepted int // writes from owners whose lease no longer exists
	write := func(who string, l lease, seg int, body string) answer {
		if who == "b" { // B is live: its 1 s proof is refreshed; A writes with what it had
			l = p.freshStatus(t, "token-b", l)
		}
		r := p.put(t, "token-"+who, l, res, seg, body)
		if who == "a" && lost { // A's lease vanished with the state (or predates the restored copy)
			vanished++
			if r.status == 200 {
				vanishedAccepted++
			}
		}
		return r
	}

	// A writes before anyone else is issued a grant.
	r := write("a", a, 1, "A early")
	if !lost { // the control: without a loss A still holds its lease, and its write counts
		if r.status != 200 {
			t.Fatalf("control: A's write without a loss: %d %s", r.status, r.body)
		}
		return
	}
	if r.status == 200 {
		t.Errorf("A's write right after the loss was accepted")
	}
	// B acquires: refused while grants are paused, then issued above A's fence.
	b, paused := p.acquireWhenResumed(t, "token-b", res, "b-1", "close-books")
	if b.fence <= a.fence {
		t.Fatalf("B's fence %d is not above A's %d", b.fence, a.fence)
	}
	if r := write("b", b, 1, "B1"); r.status != 200 {
		t.Fatalf("B's first write: %d %s", r.status, r.body)
	}
	// A writes late, with the grant and status proof it was issued before the loss.
	if r := write("a", a, 1, "A late"); r.status == 200 {
		t.Errorf("A's late write was accepted")
	} else if r.status != 401 && r.status != 409 {
		t.Errorf("A's late write: %d %s", r.status, r.body)
	}
	if st := p.do(t, "GET", "/v1/leases/"+a.id, "token-a", nil, ""); st.status == 200 && st.str("state") == "HELD" {
		t.Errorf("A's vanished lease still reads HELD: %s", st.body)
	}
	if r := write("b", b, 2, "B2"); r.status != 200 {
		t.Fatalf("B's second write: %d %s", r.status, r.body)
	}
	if obj := p.do(t, "GET", "/v1/objects/"+res, "token-b", nil, ""); string(obj.body) != "B2" {
		t.Fatalf("object = %q, want B2", obj.body)
	}
	state := p.do(t, "GET", "/v1/resources/"+res, "token-b", nil, "")
	if state.num("highestFence") != b.fence || state.num("lastSegmentSeq") != 2 {
		t.Fatalf("resource state: %s", state.body)
	}
	adm := p.do(t, "GET", "/v1/admin/state", "ops-token", nil, "")
	is, _ := adm.json["issuance"].(map[string]any)
	losses, _ := is["losses"].(float64)
	if losses < 1 || is["paused"] != false {
		t.Fatalf("issuance after the loss: %s", adm.body)
	}
	if epoch := adm.num("issuerEpoch"); epoch < 2 {
		t.Fatalf("the pre-loss epoch 1 was not retired: issuer epoch %d", epoch)
	}
	t.Logf("%s/%s: A fence %d, B fence %d, %d paused answers, %d writes from a vanished owner, %d accepted",
		mode, c.name, a.fence, b.fence, paused, vanished, vanishedAccepted)
	if vanishedAccepted != 0 {
		t.Fatalf("accepted writes from owners whose lease no longer exists: %d of %d", vanishedAccepted, vanished)
	}
}

// TestFloorThatLeavesNoFencesIsRefusedAndChangesNothing is the Floors rule
// against the binary: set-floor 2^64-1 (or within 2^32 of it) is 400
// INVALID_REQUEST, acquisitions keep working, and the admin state tells the
// operator the highest fence known (a safe floor is at or above it).
func TestFloorThatLeavesNoFencesIsRefusedAndChangesNothing(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--admin-token", "ops-token")
	l := p.acquire(t, "token-a", "local/ledger", "a-1", "op", 60000)
	p.do(t, "DELETE", "/v1/leases/"+l.id, "token-a", nil, "")
	for _, floor := range []string{"18446744073709551615", "18446744069414584321"} {
		wantCode(t, p.do(t, "POST", "/v1/admin/floor", "ops-token", nil, `{"floor":`+floor+`}`), http.StatusBadRequest, "INVALID_REQUEST")
	}
	if next := p.acquire(t, "token-a", "local/ledger", "a-2", "op", 60000); next.fence != l.fence+1 {
		t.Fatalf("after refused floors: fence %d, want %d", next.fence, l.fence+1)
	}
	st := p.do(t, "POST", "/v1/admin/floor", "ops-token", nil, `{"floor":1000}`)
	is, _ := st.json["issuance"].(map[string]any)
	if st.status != 200 || is["highWater"] != float64(1000) || is["paused"] != false {
		t.Fatalf("floor 1000: %d %s", st.status, st.body)
	}
}

// TestStandaloneRegistryWithoutAFenceStoreWaitsForAnOperatorFloor runs
// `gateway registry` (its embedded fence store is not the gateways') on a
// Redis that restarts empty: grants pause and stay paused past the proof
// life, the state says a floor is needed, and after an operator floor
// grants resume above it.
func TestStandaloneRegistryWithoutAFenceStoreWaitsForAnOperatorFloor(t *testing.T) {
	r := testenv.OwnRedis(t)
	dir := t.TempDir()
	conf := lossConfig(t, dir, "registry-1", "access: {rules: [{identity: worker-a, lease: [db/ledger]}]}\n")
	p := startGateway(t, "registry", "--config", conf, "--data-dir", filepath.Join(dir, "data"), "--identity", "worker-a=token-a",
		"--admin-token", "ops-token", "--registry-backend", "redis://"+r.Addr(), "--allow-volatile-backend")
	a := p.acquire(t, "token-a", "db/ledger", "a-1", "op", 60000)
	r.RestartEmpty()
	acquire := func() answer {
		return p.do(t, "POST", "/v1/leases", "token-a", map[string]string{"Content-Type": "application/json"},
			`{"resource":"db/ledger","requestId":"a-2","ttlMs":60000,"operationId":"op"}`)
	}
	wantCode(t, acquire(), http.StatusServiceUnavailable, "COORDINATION_STATE_LOST")
	time.Sleep(3200 * time.Millisecond) // past one proof life and the 2 s skew: still paused, nobody said how high gateways went
	wantCode(t, acquire(), http.StatusServiceUnavailable, "COORDINATION_STATE_LOST")
	st := p.do(t, "GET", "/v1/admin/state", "ops-token", nil, "")
	is, _ := st.json["issuance"].(map[string]any)
	if is["paused"] != true || is["needsFloor"] != true || is["highWater"] != float64(a.fence) {
		t.Fatalf("state while waiting for a floor: %s", st.body)
	}
	if f := p.do(t, "POST", "/v1/admin/floor", "ops-token", nil, `{"floor":500}`); f.status != 200 {
		t.Fatalf("floor: %d %s", f.status, f.body)
	}
	b := acquire()
	if b.status != http.StatusCreated || b.num("fenceToken") <= 500 {
		t.Fatalf("after the operator floor: %d %s", b.status, b.body)
	}
}

// TestProofModeReplicaWithARegistryURLRefusesAVanishedOwner is the sequence
// at a registry-less replica in proof mode that knows the registry's URL:
// the registry's Redis restarts empty, the vanished owner A writes at the
// replica with its fresh proof (refused: the first segment of a grant is
// confirmed at the registry), B acquires above A and writes (accepted), A
// writes late (refused).
func TestProofModeReplicaWithARegistryURLRefusesAVanishedOwner(t *testing.T) {
	r := testenv.OwnRedis(t)
	regDir := t.TempDir()
	reg := startGateway(t, "dev", "--data-dir", regDir, "--identity", "worker-a=token-a", "--identity", "worker-b=token-b",
		"--gateway", "replica=replica-token", "--admin-token", "ops-token",
		"--registry-backend", "redis://"+r.Addr(), "--allow-volatile-backend")
	gwDir := t.TempDir()
	cfg := filepath.Join(gwDir, "gw.yaml")
	yml := fmt.Sprintf(`dataDir: %s
trustBundle: %s
registryURL: %s
registryCredential: {name: replica, token: replica-token}
stores: {local: "local:"}
identities: [{name: worker-a, token: token-a}, {name: worker-b, token: token-b}]
access: {rules: [{identity: worker-a, lease: [local]}, {identity: worker-b, lease: [local]}]}
reconcile: {interval: 100ms, deadline: 15m, orphan: 2m}
`, filepath.Join(gwDir, "data"), filepath.Join(regDir, "trust-bundle.json"), reg.base)
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, "serve", "--config", cfg)
	const res = "local/rep/9"
	w := reg.acquire(t, "token-b", res, "w-1", "rep", 60000)
	if r := gw.put(t, "token-b", w, res, 1, "W"); r.status != http.StatusOK {
		t.Fatalf("W at the replica: %d %s", r.status, r.body)
	}
	reg.do(t, "DELETE", "/v1/leases/"+w.id, "token-b", nil, "")
	a := reg.acquire(t, "token-a", res, "a-1", "rep", 60000) // unwritten
	r.RestartEmpty()
	accepted := 0
	if rr := gw.put(t, "token-a", a, res, 1, "A early"); rr.status == http.StatusOK {
		accepted++
	}
	b, _ := reg.acquireWhenResumed(t, "token-b", res, "b-1", "rep")
	if b.fence <= a.fence {
		t.Fatalf("B's fence %d not above A's %d", b.fence, a.fence)
	}
	for deadline := time.Now().Add(20 * time.Second); ; { // the replica trusts the rotated key once it reloaded the bundle
		rr := gw.put(t, "token-b", b, res, 1, "B1")
		if rr.status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B at the replica: %d %s", rr.status, rr.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if rr := gw.put(t, "token-a", a, res, 1, "A late"); rr.status == http.StatusOK {
		accepted++
	}
	if accepted != 0 {
		t.Fatalf("accepted writes from the vanished owner at the replica: %d", accepted)
	}
	if obj := gw.do(t, "GET", "/v1/objects/"+res, "token-b", nil, ""); string(obj.body) != "B1" {
		t.Fatalf("object = %q", obj.body)
	}
}

// acquireWhenResumed asks for a lease on resource until grants resume after
// a coordination state loss (503 COORDINATION_STATE_LOST with Retry-After
// meanwhile, for at most a minute) and returns it with the number of paused
// answers before it.
func (p *gatewayProc) acquireWhenResumed(t *testing.T, token, resource, requestID, opID string) (lease, int) {
	t.Helper()
	paused := 0
	deadline := time.Now().Add(60 * time.Second)
	for {
		ans := p.do(t, "POST", "/v1/leases", token, map[string]string{"Content-Type": "application/json"},
			fmt.Sprintf(`{"resource":%q,"requestId":%q,"ttlMs":60000,"operationId":%q}`, resource, requestID, opID))
		if ans.status == http.StatusCreated {
			return lease{id: ans.str("lease"), grant: ans.str("grant"), status: ans.str("statusProof"), fence: ans.num("fenceToken")}, paused
		}
		wantCode(t, ans, http.StatusServiceUnavailable, "COORDINATION_STATE_LOST")
		if ans.header.Get("Retry-After") == "" {
			t.Fatal("COORDINATION_STATE_LOST without Retry-After")
		}
		if paused++; time.Now().After(deadline) {
			t.Fatalf("grants still paused after a minute: %s", ans.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// lossConfig writes dir/gateway.yaml for a coordination state loss test: an
// embedded registry signing with keyID at issuer epoch 1 whose status proofs
// live 1 s (so a loss's pause is short: 3 s with the clock skew), then extra YAML; it returns the
// file's path.
func lossConfig(t *testing.T, dir, keyID, extra string) string {
	t.Helper()
	conf := filepath.Join(dir, "gateway.yaml")
	yml := "registry:\n  backend: embedded\n  keyId: " + keyID + "\n  issuerEpoch: 1\n  statusLife: 1s\n" + extra
	if err := os.WriteFile(conf, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return conf
}
