package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// TestKillWithWritesInFlightKeepsEveryAnswerAtAnotherReplica: as
// TestKillInTheDeferWindowKeepsEveryAnswerAtAnotherReplica, but replica A
// is killed (SIGKILL) as the 96th answer arrives, with the other workers'
// next writes in flight: an admission that committed carried the settle of
// the worker's last answered write (the fold), one that did not left it
// PENDING beside an object that names it, and the write in flight may or
// may not have landed. Read raw, every answered write is PENDING with its
// resource's pending mark or COMMITTED at its answered version. Replica B
// (same Postgres and object store, effectTimeout 2s, reconcile.orphan 3s,
// so a write in flight whose object never landed is settled within
// seconds) reads every answered receipt COMMITTED at its version by ID and
// in its resource's list; each resource ends with no effect in flight at
// the last answered segment or the one in flight after it, its object
// holding that segment's bytes, and the next segment is admitted; the
// answered receipts still read COMMITTED afterwards.
func TestKillWithWritesInFlightKeepsEveryAnswerAtAnotherReplica(t *testing.T) {
	c := newDeferCluster(t, false)
	fast := "effectTimeout: 2s\nreconcile: {interval: 300ms, orphan: 3s}\n"
	a := c.start(t, c.replicaConfig(t, "a", "500ms", fast))
	ws := newDeferWriters(t, c.reg, c.store+"/inflight", 12)
	n := killMidBurst(t, a, ws, 96)

	s0 := rawPostgres(t, c.pg.URL())
	window := s0.inWindow(t, ws)
	answered := map[string]bool{}
	for _, w := range ws {
		for _, r := range w.answered {
			answered[r.ID] = true
		}
	}
	inFlight := 0
	for id, row := range s0.receipts {
		if !answered[id] && row["state"] == string(fencegate.ReceiptPending) {
			inFlight++
		}
	}
	t.Logf("%d writes answered COMMITTED before the kill; %d of them PENDING in the store (not folded), %d unanswered writes admitted and PENDING",
		n, len(window), inFlight)
	checkSettledAtAnswered(t, s0, ws, window)

	b := c.start(t, c.replicaConfig(t, "b", "500ms", fast))
	for _, w := range ws {
		for _, r := range w.answered {
			readByID(t, b, r)
		}
		readByResource(t, b, w.res, w.answered...)
	}
	busy := 0
	for _, w := range ws {
		seg, body := settledSegment(t, b, w)
		o := b.do(t, "GET", "/v1/objects/"+w.res, deferToken, nil, "")
		if o.status != http.StatusOK || string(o.body) != body {
			t.Fatalf("%s at segment %d holds %q (%d), want %q", w.res, seg, o.body, o.status, body)
		}
		next := fmt.Sprintf("%s segment %d", w.res, seg+1)
		got, nb := putUntilAdmitted(t, b, w.lease, w.res, seg+1, next)
		busy += nb
		if got.status != http.StatusOK || got.str("state") != "COMMITTED" {
			t.Fatalf("%s: segment %d after the kill: %d %s", w.res, seg+1, got.status, got.body)
		}
		for _, r := range w.answered {
			readByID(t, b, r)
		}
	}
	t.Logf("the next admissions at replica B met RESOURCE_BUSY %d times", busy)
}

// settledSegment waits (bounded) until w's resource has no effect in
// flight and returns its last segment and that segment's body: the last
// answered one, or the one in flight after it if that landed.
func settledSegment(t *testing.T, gw *gatewayProc, w *deferWriter) (int, string) {
	t.Helper()
	last, body := w.last()
	for deadline := time.Now().Add(20 * time.Second); ; {
		a := gw.do(t, "GET", "/v1/resources/"+w.res, deferToken, nil, "")
		if a.status != http.StatusOK {
			t.Fatalf("resource %s: %d %s", w.res, a.status, a.body)
		}
		seg := int(a.num("lastSegmentSeq"))
		if a.str("pendingReceipt") == "" || time.Now().After(deadline) {
			switch {
			case a.str("pendingReceipt") != "":
				t.Fatalf("resource %s keeps an effect in flight: %s", w.res, a.body)
			case seg == int(last.Segment):
				return seg, body
			case seg == int(last.Segment)+1:
				return seg, fmt.Sprintf("%s segment %d", w.res, seg)
			}
			t.Fatalf("resource %s at segment %d after its answered segment %d", w.res, seg, last.Segment)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
