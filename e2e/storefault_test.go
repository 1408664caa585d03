package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/testenv"
)

// burstTally counts the answers a burst of writers and readers got.
type burstTally struct {
	mu              sync.Mutex
	answers         map[string]int // "status code"
	noRetryAfter    int            // 503 answers without Retry-After
	accepted        atomic.Int64
	unexpected      []string
	transportErrors int
}

func (b *burstTally) record(a answer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.answers[fmt.Sprintf("%d %s", a.status, a.str("code"))]++
	if a.status == http.StatusServiceUnavailable && a.header.Get("Retry-After") == "" {
		b.noRetryAfter++
	}
}

// TestPostgresRestartMidBurstLeavesNothingUnsettled runs the built gateway on a
// Postgres fence store of its own, restarts that Postgres in the middle of a
// burst of fenced writes (8 writers, each on its own resource, retrying a
// segment until it is accepted, as the README tells workers to) and of reads,
// and checks: no answer is 500 (store faults are 503 BACKEND_UNAVAILABLE with
// Retry-After, or MUTATION_UNKNOWN for an effect whose receipt could not be
// settled yet); and once Postgres is back, every receipt left PENDING or
// UNKNOWN is settled by the gateway's background settle retry, well inside
// the reconciler's orphan window (2 minutes by default), so the count of
// unsettled receipts, polled, reaches 0. It runs with the fence store alone on
// that Postgres, with the registry on it too, and with a crash (immediate
// stop) instead of a clean restart.
func TestPostgresRestartMidBurstLeavesNothingUnsettled(t *testing.T) {
	t.Run("fence store", func(t *testing.T) { restartMidBurst(t, false, false) })
	// The registry on the same Postgres too: status queries and the
	// registry's own faults must be 503 as well.
	t.Run("fence store and registry", func(t *testing.T) { restartMidBurst(t, true, false) })
	// A crash (immediate stop, recovery on start) instead of a clean restart.
	t.Run("crash", func(t *testing.T) { restartMidBurst(t, true, true) })
}

func restartMidBurst(t *testing.T, registryToo, crash bool) {
	pg := testenv.OwnPostgres(t)
	args := []string{"dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a",
		"--status-mode", "query", "--fence-store", pg.URL()}
	if registryToo {
		args = append(args, "--registry-backend", pg.URL())
	}
	p := startGateway(t, args...)
	const writers = 8
	tally := &burstTally{answers: map[string]int{}}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range writers {
		res := fmt.Sprintf("local/burst/%d", i)
		l := p.acquire(t, "token-a", res, fmt.Sprintf("burst-%d", i), fmt.Sprintf("op-burst-%d", i), 600_000)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seg := 1; ; {
				a, err := p.tryDo("PUT", fmt.Sprintf("/v1/objects/%s/part", res), "token-a", fenceHeaders(l, seg), fmt.Sprintf("w%d-s%d", i, seg))
				if err != nil {
					tally.mu.Lock()
					tally.transportErrors++
					tally.mu.Unlock()
					continue
				}
				tally.record(a)
				switch {
				case a.status == http.StatusOK:
					seg++
					tally.accepted.Add(1)
					if stop.Load() {
						return // end on an accepted write: nothing of ours is in flight
					}
				case a.str("code") == "MUTATION_UNKNOWN", a.str("code") == "BACKEND_UNAVAILABLE", a.str("code") == "RESOURCE_BUSY":
					time.Sleep(20 * time.Millisecond) // pacing a retry, as a worker would
				default:
					tally.mu.Lock()
					tally.unexpected = append(tally.unexpected, fmt.Sprintf("%s seg %d: %d %s", res, seg, a.status, a.body))
					tally.mu.Unlock()
					return
				}
			}
		}()
	}
	// Readers: lists and state reads must answer 503, not 500, while the store is down.
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for !stop.Load() {
			for _, path := range []string{"/v1/receipts?operationId=op-burst-0", "/v1/resources/local/burst/1", "/v1/unknown", "/v1/quarantine"} {
				if a, err := p.tryDo("GET", path, "token-a", nil, ""); err == nil {
					tally.record(a)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	waitAccepted := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for tally.accepted.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d writes accepted, want %d; answers %v", tally.accepted.Load(), n, tally.answers)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitAccepted(writers * 5)
	if crash {
		pg.Kill()
		pg.Start()
	} else {
		pg.Restart()
	}
	back := time.Now()
	before := tally.accepted.Load()
	waitAccepted(before + writers*5)
	stop.Store(true)
	wg.Wait()
	readers.Wait()

	// Poll Postgres itself for receipts not settled.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var open, total int
	deadline := back.Add(time.Minute) // well below the 2-minute orphan window
	for {
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state IN ('PENDING', 'UNKNOWN')), count(*) FROM fence_receipts`).Scan(&open, &total); err != nil {
			t.Fatal(err)
		}
		if open == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	tally.mu.Lock()
	defer tally.mu.Unlock()
	t.Logf("answers %v; %d transport errors; %d receipts; all settled %s after Postgres was back",
		tally.answers, tally.transportErrors, total, time.Since(back).Round(time.Millisecond))
	if open != 0 {
		t.Fatalf("%d of %d receipts still PENDING or UNKNOWN %s after Postgres came back", open, total, time.Since(back).Round(time.Second))
	}
	if len(tally.unexpected) > 0 {
		t.Fatalf("unexpected answers: %v", tally.unexpected)
	}
	for k, n := range tally.answers {
		if k[:3] == "500" {
			t.Errorf("%d answers %q during the restart: store faults must be 503 BACKEND_UNAVAILABLE", n, k)
		}
	}
	if tally.noRetryAfter > 0 {
		t.Errorf("%d 503 answers without Retry-After", tally.noRetryAfter)
	}
	if tally.answers["503 BACKEND_UNAVAILABLE"] == 0 {
		t.Errorf("no answer saw the outage (answers %v): the restart did not hit the burst", tally.answers)
	}
}
