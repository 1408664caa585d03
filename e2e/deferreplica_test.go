package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// kill9 kills the process with SIGKILL (no shutdown, no drain: the
// deferred settles die with it) and waits until it is gone.
func (p *gatewayProc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
}

// sigterm stops the process with SIGTERM and fails unless it exits 0.
func (p *gatewayProc) sigterm(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.waitExit(t, 30*time.Second); code != 0 {
		t.Fatalf("gateway exited %d after SIGTERM:\n%s", code, p.logs.String())
	}
}

// writeConfig writes a test's config file.
func writeConfig(t *testing.T, path, data string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// deferCluster is a registry process and the config of `gateway serve`
// replicas sharing one Postgres fence store and one object store, with a
// long deferSettle window (a kill right after an answer lands inside it)
// and a reconciler that runs once at start only (reconcile.interval
// 10m), so that what proves a receipt after a crash is the read or the
// admission under test, not a reconciler pass.
type deferCluster struct {
	pg    *testenv.Postgres
	reg   *gatewayProc
	store string // the object store's name
	url   string // its URL
	env   []string
	trust string
}

func newDeferCluster(t *testing.T, s3 bool) *deferCluster {
	t.Helper()
	c := &deferCluster{pg: testenv.OwnPostgres(t), store: "local", url: "local:" + filepath.Join(t.TempDir(), "objects")}
	if s3 {
		b := newS3Bucket(t)
		c.store, c.url, c.env = "s3c", b.storeURL(""), b.env()
	}
	regDir := t.TempDir()
	c.trust = filepath.Join(regDir, "trust-bundle.json")
	cfg := writeConfig(t, filepath.Join(regDir, "registry.yaml"), fmt.Sprintf(`dataDir: %s
fenceStore: %q
trustBundle: %s
identities: [{name: worker-a, token: %s}]
access: {rules: [{identity: worker-a, lease: [%s]}]}
registry: {backend: embedded, keyId: deferkill-1, issuerEpoch: 1, statusLife: 60s}
`, filepath.Join(regDir, "data"), c.pg.URL(), c.trust, deferToken, c.store))
	c.reg = startGateway(t, "registry", "--config", cfg)
	return c
}

// replicaConfig is one replica's config file (its own data directory),
// with deferSettle window; extra replaces the reconcile line.
func (c *deferCluster) replicaConfig(t *testing.T, name, window, extra string) string {
	t.Helper()
	if extra == "" {
		extra = "reconcile: {interval: 10m}\n"
	}
	dir := t.TempDir()
	return writeConfig(t, filepath.Join(dir, name+".yaml"), fmt.Sprintf(`dataDir: %s
fenceStore: %q
stores: {%s: %q}
trustBundle: %s
identities: [{name: worker-a, token: %s}]
access: {rules: [{identity: worker-a, lease: [%s]}]}
deferSettle: %s
%s`, filepath.Join(dir, "data"), c.pg.URL(), c.store, c.url, c.trust, deferToken, c.store, window, extra))
}

func (c *deferCluster) start(t *testing.T, cfg string) *gatewayProc {
	t.Helper()
	return startGatewayEnv(t, c.env, "serve", "--config", cfg)
}

// TestKillInTheDeferWindowKeepsEveryAnswerAtAnotherReplica: twelve workers
// write segments through replica A (`gateway serve`, Postgres fence store,
// deferSettle 500ms); right after a burst of COMMITTED answers A is killed
// with SIGKILL, inside the window. Read raw, the store holds the last
// answered write of each resource PENDING (counted: the writes killed in
// the window) and every other answered write COMMITTED at its answered
// version and settledAt (folded). Before A restarts, replica B on the same
// Postgres and object store reads every answered receipt COMMITTED at the
// answered version: each resource is first touched through one path (by
// ID, by operation, by resource/fence/segment, a replay of the segment =
// the original receipt with the object untouched, the resource's state,
// or the next admission), and that first touch changes the raw state by
// exactly the settle; then every path for every write. B admits the next
// segment, or after a release the next fence, on every resource (a
// bounded wait on RESOURCE_BUSY, asserting the answer), and the old
// holder's next write is refused STALE_OWNER. After A restarts, the same
// reads, replays and stale writes hold and change nothing in the store.
// With the local object store B starts after the kill (the directory is
// locked by its owner); with versitygw S3 B runs throughout.
func TestKillInTheDeferWindowKeepsEveryAnswerAtAnotherReplica(t *testing.T) {
	t.Run("local", func(t *testing.T) { killInWindowAtReplica(t, false) })
	t.Run("s3", func(t *testing.T) { killInWindowAtReplica(t, true) })
}

func killInWindowAtReplica(t *testing.T, s3 bool) {
	c := newDeferCluster(t, s3)
	cfgA, cfgB := c.replicaConfig(t, "a", "500ms", ""), c.replicaConfig(t, "b", "500ms", "")
	a := c.start(t, cfgA)
	var b *gatewayProc
	if s3 {
		b = c.start(t, cfgB)
	}
	ws := newDeferWriters(t, c.reg, c.store+"/deferkill", 12)
	n := deferBurst(t, a, ws, 96)
	a.kill9()

	s0 := rawPostgres(t, c.pg.URL())
	window := s0.inWindow(t, ws)
	t.Logf("%d writes answered COMMITTED, %d of them killed inside the window (PENDING in the store)", n, len(window))
	if len(window) == 0 {
		t.Fatal("no answered write was still deferred at the kill: the run tests nothing")
	}
	checkSettledAtAnswered(t, s0, ws, window)

	if !s3 {
		b = c.start(t, cfgB)
	}
	written, busy := firstTouch(t, c.reg, b, ws)
	checkOnlySettled(t, s0, rawPostgres(t, c.pg.URL()), window, written)
	readEverything(t, b, ws)
	for _, w := range ws {
		if w.idx%6 != 5 {
			busy += w.next(t, c.reg, b)
		}
	}
	t.Logf("the next admissions at replica B met RESOURCE_BUSY %d times", busy)
	readEverything(t, b, ws) // B's own new settles are made durable by its reads
	proofs, byReconciler := strings.Count(b.logs.String(), "pending receipt proven committed by its object"),
		strings.Count(b.logs.String(), "reconciled: pending receipt proven committed")
	t.Logf("replica B proved %d receipts as it read or admitted, its reconciler %d", proofs-byReconciler, byReconciler)
	if !s3 {
		b.sigterm(t) // the local store's directory is locked by whoever holds it
	}

	s2 := rawPostgres(t, c.pg.URL())
	a2 := c.start(t, cfgA)
	readEverything(t, a2, ws)
	for _, w := range ws {
		last, body := w.last()
		readByReplay(t, a2, w.lease, last, body)
		w.staleWrite(t, a2)
	}
	checkSameState(t, "restart, reads, replays and stale writes", s2, rawPostgres(t, c.pg.URL()))
}

// firstTouch reads or writes each writer's resource for the first time
// after the kill, through the path idx%6 names: its last answered receipt
// by ID, by operation, by resource/fence/segment, as a replay of its
// segment, the resource's state, or the next admission (next). It returns
// the resources written and the RESOURCE_BUSY answers met.
func firstTouch(t *testing.T, reg, gw *gatewayProc, ws []*deferWriter) (map[string]bool, int) {
	t.Helper()
	written := map[string]bool{}
	busy := 0
	for _, w := range ws {
		last, body := w.last()
		switch w.idx % 6 {
		case 0:
			readByID(t, gw, last)
		case 1:
			readByOperation(t, gw, w.op, last)
		case 2:
			readBySegment(t, gw, last)
		case 3:
			readByReplay(t, gw, w.lease, last, body)
		case 4:
			readResource(t, gw, last)
		case 5:
			busy += w.next(t, reg, gw)
			written[w.res] = true
		}
	}
	return written, busy
}

// next admits the writer's next write at gw after the kill: the next
// segment under its lease for writers 0-5, 12-17..., else the next fence
// (its lease released at reg, a new one acquired) at segment 1, after
// which the old holder's next write is refused STALE_OWNER. It returns
// the RESOURCE_BUSY answers met on the way.
func (w *deferWriter) next(t *testing.T, reg, gw *gatewayProc) int {
	t.Helper()
	seg := len(w.answered) + 1
	if (w.idx/6)%2 == 1 {
		if r := reg.do(t, "DELETE", "/v1/leases/"+w.lease.id, deferToken, nil, ""); r.status/100 != 2 {
			t.Fatalf("release %s: %d %s", w.res, r.status, r.body)
		}
		old := w.lease
		w.lease = reg.acquire(t, deferToken, w.res, "req2-"+w.op, w.op, 120_000)
		if w.lease.fence <= old.fence {
			t.Fatalf("%s: new fence %d not above %d", w.res, w.lease.fence, old.fence)
		}
		w.stale, w.staleSeg, seg = &old, seg, 1
	}
	body := fmt.Sprintf("%s fence %d segment %d", w.res, w.lease.fence, seg)
	a, busy := putUntilAdmitted(t, gw, w.lease, w.res, seg, body)
	if a.status != http.StatusOK || a.str("state") != "COMMITTED" {
		t.Fatalf("%s: the next write after the kill (fence %d segment %d): %d %s", w.res, w.lease.fence, seg, a.status, a.body)
	}
	w.answered, w.bodies = append(w.answered, answeredReceipt(t, a)), append(w.bodies, body)
	w.staleWrite(t, gw)
	return busy
}

// staleWrite sends the old holder's next write, if the fence moved, and
// fails unless it is refused STALE_OWNER.
func (w *deferWriter) staleWrite(t *testing.T, gw *gatewayProc) {
	t.Helper()
	if w.stale == nil {
		return
	}
	wantCode(t, gw.put(t, deferToken, *w.stale, w.res, w.staleSeg, "stale write"), http.StatusConflict, "STALE_OWNER")
}
