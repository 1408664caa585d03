package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestPostgresCrashUnderLoadKeepsEveryAnsweredReceipt: 32 workers write
// their own resources through `gateway serve` (default deferSettle: each
// settle durable before its answer; admissions and settles of many
// resources share one Postgres transaction) over a private Postgres, which
// is crashed (pg_ctl stop -m immediate: no checkpoint, crash recovery at
// the next start) as the 160th answer arrives, batches in flight. Every
// worker stops at its first answer that is not COMMITTED; answers that
// still arrive COMMITTED count as answered. Postgres starts again and the
// same gateway process (no restart: its pool reconnects) reads every
// answered write COMMITTED at its fence, segment, digest and version; each
// resource settles at its last answered segment or the one in flight after
// it, its fence unchanged, its object holding that segment; a replay of the
// last answered segment answers its receipt; the next segment is admitted.
// A batch whose COMMIT the crash cut off must never be answered COMMITTED
// unless it is durable.
func TestPostgresCrashUnderLoadKeepsEveryAnsweredReceipt(t *testing.T) {
	c := newDeferCluster(t, false)
	gw := c.start(t, c.replicaConfig(t, "a", "0s", "reconcile: {interval: 300ms, orphan: 3s}\neffectTimeout: 2s\n"))
	ws := newDeferWriters(t, c.reg, c.store+"/pgcrash", 32)
	var (
		mu      sync.Mutex
		n, late int
		crashed bool
		reached = make(chan struct{})
		once    sync.Once
		wg      sync.WaitGroup
	)
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seg := len(w.answered) + 1
				body := fmt.Sprintf("%s segment %d", w.res, seg)
				a, err := gw.tryDo("PUT", "/v1/objects/"+w.res, deferToken, fenceHeaders(w.lease, seg), body)
				mu.Lock()
				after := crashed
				mu.Unlock()
				if err != nil {
					if !after {
						t.Errorf("writer %d segment %d before the crash: %v", w.idx, seg, err)
					}
					return
				}
				if a.status != http.StatusOK || a.str("state") != "COMMITTED" {
					if !after {
						t.Errorf("writer %d segment %d before the crash: %d %s", w.idx, seg, a.status, a.body)
					}
					return
				}
				r := answeredReceipt(t, a)
				mu.Lock()
				w.answered, w.bodies = append(w.answered, r), append(w.bodies, body)
				n++
				if after {
					late++
				}
				if n >= 160 {
					once.Do(func() { close(reached) })
				}
				mu.Unlock()
				if after {
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-reached:
	case <-done:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the writers ended after %d answers, before the 160th: no crash", n)
	case <-time.After(60 * time.Second):
		mu.Lock()
		crashed = true // the writers end at their next answer, silently
		got := n
		mu.Unlock()
		<-done
		t.Fatalf("only %d answers within 60 s, want 160: no crash", got)
	}
	mu.Lock()
	crashed = true
	mu.Unlock()
	c.pg.Kill()
	<-done
	if t.Failed() {
		t.FailNow()
	}
	c.pg.Start()
	for _, w := range ws {
		if len(w.answered) > 0 {
			untilPoolRecovered(t, gw, w.answered[0].ID)
			break
		}
	}
	checkEveryAnswer(t, gw, ws)
	t.Logf("%d writes answered COMMITTED (%d of them after the crash began), all COMMITTED as answered after recovery", n, late)
}

// untilPoolRecovered waits until the gateway's Postgres pool has found its
// connections dead since the crash: each is noticed only when next used, and
// that request is answered 503 BACKEND_UNAVAILABLE (a clear, retryable answer
// that changes nothing; any other failure fails the test). Rounds of more
// concurrent reads than the pool has connections use every idle one; a round
// in which all succeed ends the wait.
func untilPoolRecovered(t *testing.T, gw *gatewayProc, id string) {
	t.Helper()
	const readers = 24 // the pool holds at most 10
	deadline := time.Now().Add(30 * time.Second)
	for {
		codes := make([]int, readers)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := gw.tryDo("GET", "/v1/receipts/"+id, deferToken, nil, "")
				switch {
				case err != nil:
					codes[i] = -1
				case a.status == http.StatusServiceUnavailable && a.str("code") != "BACKEND_UNAVAILABLE":
					t.Errorf("read after the restart: 503 %s", a.body)
				default:
					codes[i] = a.status
				}
			}()
		}
		wg.Wait()
		ok := true
		for _, c := range codes {
			switch c {
			case http.StatusOK:
			case http.StatusServiceUnavailable, -1:
				ok = false
			default:
				t.Fatalf("read of receipt %s after the restart: status %d", id, c)
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway still answered BACKEND_UNAVAILABLE 30 s after Postgres started again")
		}
	}
}
