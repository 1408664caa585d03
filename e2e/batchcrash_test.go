package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestKilledGatewayKeepsEveryWriteItAnsweredCommitted: eight workers write
// concurrently to their own keys on `gateway dev` (local object store) over
// each fence store that batches (the embedded store's group commit; Postgres,
// whose batches carry admissions and settles together), so admissions and
// settles share transactions; the process is killed (SIGKILL) mid-stream and
// restarted on the same data directory and fence store. Every write the
// gateway answered COMMITTED before the kill is COMMITTED after the restart,
// its segment is the resource's (or an older one's, if a later write was in
// flight), and the object holds that write's body or a later segment's. A
// process kill keeps the page cache (and the Postgres server runs on), so
// this pins the batching's ordering (no answer before its commit), not the
// disk's fsync; the fsyncs are the stores' own tests and package docs.
func TestKilledGatewayKeepsEveryWriteItAnsweredCommitted(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { killMidBatches(t, nil) })
	t.Run("postgres", func(t *testing.T) { killMidBatches(t, []string{"--fence-store", testenv.PostgresURL(t)}) })
}

// killMidBatches runs the test above on `gateway dev` with extra flags.
func killMidBatches(t *testing.T, extra []string) {
	const (
		token   = "token-a"
		workers = 8
	)
	dataDir := t.TempDir()
	args := append([]string{"dev", "--data-dir", dataDir, "--identity", "worker-a=" + token}, extra...)
	p1 := startGateway(t, args...)

	type acked struct {
		seg     int
		receipt string
	}
	var (
		mu    sync.Mutex
		last  = make([]acked, workers)
		total int
		wg    sync.WaitGroup
	)
	leases := make([]lease, workers)
	for w := range workers {
		leases[w] = p1.acquire(t, token, fmt.Sprintf("local/batch/w%d", w), fmt.Sprintf("batch-%d", w), fmt.Sprintf("op-batch-%d", w), 120_000)
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seg := 1; ; seg++ {
				a, err := p1.tryDo("PUT", fmt.Sprintf("/v1/objects/local/batch/w%d", w), token, fenceHeaders(leases[w], seg), fmt.Sprintf("w%d-%d", w, seg))
				if err != nil {
					return // the gateway is gone
				}
				if a.status != http.StatusOK {
					t.Errorf("worker %d segment %d: %d %s", w, seg, a.status, a.body)
					return
				}
				id := a.header.Get("Fence-Receipt")
				if id == "" {
					id = a.str("receiptId")
				}
				mu.Lock()
				last[w] = acked{seg, id}
				total++
				mu.Unlock()
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := total
		mu.Unlock()
		if n >= 80 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = p1.cmd.Process.Kill()
	_ = p1.cmd.Wait()
	wg.Wait()
	if t.Failed() {
		return
	}

	p2 := startGateway(t, args...)
	for w, ack := range last {
		if ack.seg == 0 {
			t.Fatalf("worker %d had no write answered before the kill", w)
		}
		r := p2.do(t, "GET", "/v1/receipts/"+ack.receipt, token, nil, "")
		if r.status != http.StatusOK || r.str("state") != "COMMITTED" || int(r.num("segment")) != ack.seg {
			t.Fatalf("worker %d: segment %d was answered COMMITTED as %s; after the restart: %d %s", w, ack.seg, ack.receipt, r.status, r.body)
		}
		res := p2.do(t, "GET", fmt.Sprintf("/v1/resources/local/batch/w%d", w), token, nil, "")
		if seq := int(res.num("lastSegmentSeq")); seq < ack.seg || seq > ack.seg+1 {
			t.Fatalf("worker %d: lastSegmentSeq %d after its answered segment %d", w, seq, ack.seg)
		}
		obj := p2.do(t, "GET", fmt.Sprintf("/v1/objects/local/batch/w%d", w), token, nil, "")
		if got := string(obj.body); got != fmt.Sprintf("w%d-%d", w, ack.seg) && got != fmt.Sprintf("w%d-%d", w, ack.seg+1) {
			t.Fatalf("worker %d: object holds %q after its answered segment %d", w, got, ack.seg)
		}
	}
}
