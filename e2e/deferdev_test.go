package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// devDeferArgs starts `gateway dev` on dataDir with the given window, a
// reconciler that runs once at start only and status proofs that outlive
// the test (a stale holder's proof is still fresh when it is refused).
func devDeferArgs(t *testing.T, dataDir, window string) []string {
	t.Helper()
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "dev.yaml"), fmt.Sprintf(`deferSettle: %s
reconcile: {interval: 10m}
registry: {backend: embedded, keyId: dev-1, issuerEpoch: 1, statusLife: 60s}
`, window))
	return []string{"dev", "--config", cfg, "--data-dir", dataDir, "--identity", "worker-a=" + deferToken}
}

// TestKillInTheDeferWindowOfDevKeepsEveryAnswerAfterRestart: `gateway dev`
// (embedded fence store, local objects, deferSettle 500ms) is killed with
// SIGKILL right after a burst of COMMITTED answers from twelve workers.
// Read raw, the store holds each resource's last answered write PENDING
// (the writes killed in the window) and every earlier one COMMITTED at its
// answered version and settledAt. Restarted on the same data directory,
// the process reads each answered receipt COMMITTED at its version when it
// first touches the resource (by ID, operation, segment, replay, resource
// state, next admission), and that changes the stored state by exactly
// those settles. After another restart every read path holds for every
// answered write, the next segment or fence is admitted on every resource,
// the old holder is refused STALE_OWNER; a last restart with reads,
// replays and stale writes changes nothing in the store.
func TestKillInTheDeferWindowOfDevKeepsEveryAnswerAfterRestart(t *testing.T) {
	dataDir := t.TempDir()
	args := devDeferArgs(t, dataDir, "500ms")
	p1 := startGateway(t, args...)
	ws := newDeferWriters(t, p1, "local/devkill", 12)
	n := deferBurst(t, p1, ws, 96)
	p1.kill9()

	s0 := rawEmbedded(t, dataDir, resourcesOf(ws))
	window := s0.inWindow(t, ws)
	t.Logf("%d writes answered COMMITTED, %d of them killed inside the window (PENDING in the store)", n, len(window))
	if len(window) == 0 {
		t.Fatal("no answered write was still deferred at the kill: the run tests nothing")
	}
	checkSettledAtAnswered(t, s0, ws, window)

	p2 := startGateway(t, args...)
	written, busy := firstTouch(t, p2, p2, ws)
	proofs, byReconciler := strings.Count(p2.logs.String(), "pending receipt proven committed by its object"),
		strings.Count(p2.logs.String(), "reconciled: pending receipt proven committed")
	t.Logf("after the restart: %d receipts proven as they were read or admitted, %d by the reconciler's first pass", proofs-byReconciler, byReconciler)
	p2.sigterm(t)
	checkOnlySettled(t, s0, rawEmbedded(t, dataDir, resourcesOf(ws)), window, written)

	p3 := startGateway(t, args...)
	readEverything(t, p3, ws)
	for _, w := range ws {
		if w.idx%6 != 5 {
			busy += w.next(t, p3, p3)
		}
	}
	t.Logf("the next admissions met RESOURCE_BUSY %d times", busy)
	readEverything(t, p3, ws)
	p3.sigterm(t)

	s2 := rawEmbedded(t, dataDir, resourcesOf(ws))
	p4 := startGateway(t, args...)
	readEverything(t, p4, ws)
	for _, w := range ws {
		last, body := w.last()
		readByReplay(t, p4, w.lease, last, body)
		w.staleWrite(t, p4)
	}
	p4.sigterm(t)
	checkSameState(t, "restart, reads, replays and stale writes", s2, rawEmbedded(t, dataDir, resourcesOf(ws)))
}

// TestStopDrainsEveryDeferredSettle: under the longest window
// (deferSettle 1s), a gateway stopped with SIGTERM right after a burst of
// COMMITTED answers exits 0 with every answered settle durable: read raw
// after the exit, every answered receipt is COMMITTED at its answered
// version and settledAt and no resource keeps a pending mark. For `gateway
// serve` on Postgres the store is also read just before the SIGTERM: the
// settles still deferred then (counted) are the only change the stop makes.
func TestStopDrainsEveryDeferredSettle(t *testing.T) {
	t.Run("dev", func(t *testing.T) {
		dataDir := t.TempDir()
		p := startGateway(t, devDeferArgs(t, dataDir, "1s")...)
		ws := newDeferWriters(t, p, "local/drain", 12)
		n := deferBurst(t, p, ws, 96)
		p.sigterm(t)
		after := rawEmbedded(t, dataDir, resourcesOf(ws))
		checkDrained(t, after, ws)
		t.Logf("%d writes answered COMMITTED, all durable after the stop", n)
	})
	t.Run("serve", func(t *testing.T) {
		c := newDeferCluster(t, false)
		p := c.start(t, c.replicaConfig(t, "a", "1s", ""))
		ws := newDeferWriters(t, c.reg, c.store+"/drain", 12)
		n := deferBurst(t, p, ws, 96)
		before := rawPostgres(t, c.pg.URL())
		p.sigterm(t)
		window := before.inWindow(t, ws)
		after := rawPostgres(t, c.pg.URL())
		checkOnlySettled(t, before, after, window, nil)
		checkDrained(t, after, ws)
		t.Logf("%d writes answered COMMITTED, %d still deferred just before the SIGTERM, all durable after it", n, len(window))
	})
}

// checkDrained fails unless every answered write is stored COMMITTED as
// answered (version, settledAt) and its resource has no effect in flight.
func checkDrained(t *testing.T, rs rawState, ws []*deferWriter) {
	t.Helper()
	if left := rs.inWindow(t, ws); len(left) > 0 {
		t.Fatalf("%d answered settles were not durable when the gateway exited", len(left))
	}
	checkSettledAtAnswered(t, rs, ws, nil)
	for _, w := range ws {
		last, _ := w.last()
		row := rs.resources[w.res]
		if p := row["pendingReceipt"]; p != nil && p != "" || fmt.Sprint(row["lastSegmentSeq"]) != fmt.Sprint(last.Segment) {
			t.Fatalf("resource %s after the stop: %v (last answered segment %d)", w.res, row, last.Segment)
		}
	}
}
