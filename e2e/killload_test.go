package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
)

// TestKillUnderLoadKeepsEveryAnsweredReceipt: 32 workers write their own
// resources at once through a gateway with the default deferSettle (0: every
// settle durable before its answer), so the store's batches carry
// admissions and settles of many resources together and the local object
// store's directory syncs are shared; the process is killed (SIGKILL) as the
// 160th answer arrives, with the other workers' writes in flight, and
// restarted on the same data. After the restart every write answered
// COMMITTED reads COMMITTED by ID at its answered fence, segment, digest and
// version; each resource settles (no effect in flight) at its last answered
// segment or the one in flight after it, its highest fence is still the
// worker's (no fence moved back), its object holds that segment's bytes;
// a replay of the last answered segment answers its original receipt; the
// next segment is admitted COMMITTED. Run on `gateway serve` over a private
// Postgres (admission and settle batches mixed) with the local object store
// and with the S3 test server (versitygw), and on `gateway dev` (the
// embedded store's group commit); with a gateway of layout 3 (built at
// 02a7263 from this repository's history, or FENCEGATE_TEST_OLD_GATEWAY),
// also on a dev data directory that binary wrote first, so the kill lands on
// a file upgraded by Open; with one of layout 3 that reads the compact codec
// (built at 8441e61, or FENCEGATE_TEST_ROLLBACK_GATEWAY), also on a file this
// binary wrote, then that binary used (a rollback) and was killed mid-load,
// then this binary repaired on Open.
func TestKillUnderLoadKeepsEveryAnsweredReceipt(t *testing.T) {
	fast := "reconcile: {interval: 300ms, orphan: 3s}\neffectTimeout: 2s\n"
	t.Run("serve-postgres", func(t *testing.T) {
		c := newDeferCluster(t, false)
		cfg := c.replicaConfig(t, "a", "0s", fast)
		ws := newDeferWriters(t, c.reg, c.store+"/killload", 32)
		killUnderLoad(t, ws, func() *gatewayProc { return c.start(t, cfg) })
	})
	t.Run("serve-postgres-s3", func(t *testing.T) {
		c := newDeferCluster(t, true)
		cfg := c.replicaConfig(t, "a", "0s", fast)
		ws := newDeferWriters(t, c.reg, c.store+"/killload", 32)
		killUnderLoad(t, ws, func() *gatewayProc { return c.start(t, cfg) })
	})
	t.Run("dev-embedded", func(t *testing.T) {
		args := killLoadDevArgs(t, t.TempDir(), fast)
		first := startGateway(t, args...)
		ws := newDeferWriters(t, first, "local/killload", 32)
		first.sigterm(t)
		killUnderLoad(t, ws, func() *gatewayProc { return startGateway(t, args...) })
	})
	t.Run("dev-embedded-upgraded", func(t *testing.T) {
		old := olderGateway(t, "FENCEGATE_TEST_OLD_GATEWAY", layout3Commit)
		dataDir := t.TempDir()
		args := killLoadDevArgs(t, dataDir, fast)
		// the older binary writes the file first: leases, and a burst of
		// writes on resources of their own, settled and left as they are
		prev := startBinary(t, old, nil, args...)
		olderWs := newDeferWriters(t, prev, "local/older", 8)
		deferBurst(t, prev, olderWs, 64)
		ws := newDeferWriters(t, prev, "local/killload", 32)
		prev.sigterm(t)
		p := killUnderLoad(t, ws, func() *gatewayProc { return startGateway(t, args...) })
		readSettledWrites(t, p, olderWs)
	})
	t.Run("dev-embedded-rolled-back", func(t *testing.T) {
		old := olderGateway(t, "FENCEGATE_TEST_ROLLBACK_GATEWAY", layout3CodecCommit)
		dataDir := t.TempDir()
		args := killLoadDevArgs(t, dataDir, fast)
		// this binary writes first (layout 4), then the older one runs on
		// the file and is killed mid-load; this binary repairs it on Open
		cur := startGateway(t, args...)
		before := newDeferWriters(t, cur, "local/before", 8)
		deferBurst(t, cur, before, 64)
		cur.sigterm(t)
		prev := startBinary(t, old, nil, args...)
		ws := newDeferWriters(t, prev, "local/killload", 32)
		n := killMidBurst(t, prev, ws, 160)
		p := startGateway(t, args...)
		checkEveryAnswer(t, p, ws)
		readSettledWrites(t, p, before)
		t.Logf("%d writes answered COMMITTED by the older binary before its kill, all COMMITTED as answered after the repair", n)
	})
}

// killLoadDevArgs is `gateway dev` on dataDir with extra config lines.
func killLoadDevArgs(t *testing.T, dataDir, extra string) []string {
	t.Helper()
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "dev.yaml"), "registry: {backend: embedded, keyId: dev-1, issuerEpoch: 1, statusLife: 60s}\n"+extra)
	return []string{"dev", "--config", cfg, "--data-dir", dataDir, "--identity", "worker-a=" + deferToken}
}

// killUnderLoad runs the test above: start gives a gateway process on the
// same data every time it is called. It returns the restarted process.
func killUnderLoad(t *testing.T, ws []*deferWriter, start func() *gatewayProc) *gatewayProc {
	t.Helper()
	n := killMidBurst(t, start(), ws, 160)
	p := start()
	checkEveryAnswer(t, p, ws)
	t.Logf("%d writes answered COMMITTED before the kill, all COMMITTED as answered after the restart", n)
	return p
}

// readSettledWrites reads, through p, every answered write of ws (writers
// whose writes were all settled before a gateway stopped) by ID, then the
// last one by replay and its resource.
func readSettledWrites(t *testing.T, p *gatewayProc, ws []*deferWriter) {
	t.Helper()
	for _, w := range ws {
		for _, r := range w.answered {
			readByID(t, p, r)
		}
		last, body := w.last()
		readByReplay(t, p, w.lease, last, body)
		readResource(t, p, last)
	}
}

// checkEveryAnswer checks through p, after a crash, what the tests of this
// file promise of every answered write of ws.
func checkEveryAnswer(t *testing.T, p *gatewayProc, ws []*deferWriter) {
	t.Helper()
	for _, w := range ws {
		for _, r := range w.answered {
			readByID(t, p, r)
		}
	}
	for _, w := range ws {
		seg, body := settledSegment(t, p, w)
		res := p.do(t, "GET", "/v1/resources/"+w.res, deferToken, nil, "")
		if res.num("highestFence") != w.lease.fence {
			t.Fatalf("%s: highest fence %d after the restart, the worker's is %d", w.res, res.num("highestFence"), w.lease.fence)
		}
		o := p.do(t, "GET", "/v1/objects/"+w.res, deferToken, nil, "")
		if o.status != http.StatusOK || string(o.body) != body {
			t.Fatalf("%s at segment %d holds %q (%d), want %q", w.res, seg, o.body, o.status, body)
		}
		last, lastBody := w.last()
		if seg == int(last.Segment) && o.header.Get("ETag") != last.Version {
			t.Fatalf("%s: object ETag %s, answered version %s", w.res, o.header.Get("ETag"), last.Version)
		}
		replayAnswered(t, p, w.lease, last, lastBody)
		next := fmt.Sprintf("%s segment %d", w.res, seg+1)
		if got, _ := putUntilAdmitted(t, p, w.lease, w.res, seg+1, next); got.status != http.StatusOK || got.str("state") != "COMMITTED" {
			t.Fatalf("%s: segment %d after the restart: %d %s", w.res, seg+1, got.status, got.body)
		}
	}
}
