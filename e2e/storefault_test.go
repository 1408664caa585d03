package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
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
	committed       []string // receipt IDs answered 200
	// leftUnknown holds the receipts answered MUTATION_UNKNOWN whose writer
	// stopped there, each with the outcome its answers told: NOT_APPLIED
	// if a 503 BACKEND_UNAVAILABLE for it said nothing was forwarded, else
	// "" (the gateway's log tells, COMMITTED if it does not).
	leftUnknown map[string]fencegate.ReceiptState
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
// burst of fenced writes (8 writers, each on its own resource) and of reads,
// and checks: no answer is 500 (store faults are 503 BACKEND_UNAVAILABLE with
// Retry-After, or MUTATION_UNKNOWN for an effect whose receipt could not be
// settled yet); and once Postgres is back, every receipt left PENDING or
// UNKNOWN is settled by the gateway's background settle retry, so the count
// of unsettled receipts in Postgres, polled, reaches 0. Writer 0 retries a
// segment until it is accepted, as the README tells workers to (the readers
// read its receipts and resource); the others stop at their first
// MUTATION_UNKNOWN and leave its receipt alone, so nothing but the settle
// retry can settle it: the reconciler makes no pass during the test (its
// interval is an hour) and no client reads, resends or follows it. At least
// one such receipt is required (Postgres is restarted again, up to five
// times, until one exists); each must reach, in the raw table, the outcome
// the gateway knew: NOT_APPLIED where a 503 for it said nothing was
// forwarded, else the state logged for its failed settle, else COMMITTED.
// Every receipt answered 200 must read COMMITTED there. It runs with the fence store alone
// on that Postgres, with the registry on it too, and with a crash (immediate
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
	// The reconciler's first pass runs at start, its next in an hour: it
	// settles nothing the test waits for (it would prove a PENDING receipt
	// from its object after a second).
	cfg := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(cfg, []byte("reconcile:\n  interval: 1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a",
		"--status-mode", "query", "--fence-store", pg.URL(), "--config", cfg}
	if registryToo {
		args = append(args, "--registry-backend", pg.URL())
	}
	p := startGateway(t, args...)
	const writers = 8
	tally := &burstTally{answers: map[string]int{}, leftUnknown: map[string]fencegate.ReceiptState{}}
	var stop, quit atomic.Bool // stop: end on an accepted write; quit: end now
	var wg sync.WaitGroup
	for i := range writers {
		res := fmt.Sprintf("local/burst/%d", i)
		l := p.acquire(t, "token-a", res, fmt.Sprintf("burst-%d", i), fmt.Sprintf("op-burst-%d", i), 600_000)
		wg.Add(1)
		go func() {
			defer wg.Done()
			notForwarded := map[string]bool{} // receipts a 503 said nothing was forwarded for
			for seg := 1; !quit.Load(); {
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
					tally.mu.Lock()
					if id := a.str("receiptId"); id != "" {
						tally.committed = append(tally.committed, id)
					} else {
						tally.unexpected = append(tally.unexpected, fmt.Sprintf("%s seg %d: 200 without a receipt: %s", res, seg, a.body))
					}
					tally.mu.Unlock()
					seg++
					tally.accepted.Add(1)
					if stop.Load() {
						return // end on an accepted write: nothing of ours is in flight
					}
				case a.str("code") == "MUTATION_UNKNOWN" && i != 0:
					// Leave the receipt to the gateway: no resend, no read.
					tally.mu.Lock()
					if id := a.str("receiptId"); id != "" {
						tally.leftUnknown[id] = ""
						if notForwarded[id] {
							tally.leftUnknown[id] = fencegate.ReceiptNotApplied
						}
					} else {
						tally.unexpected = append(tally.unexpected, fmt.Sprintf("%s seg %d: MUTATION_UNKNOWN without a receipt: %s", res, seg, a.body))
					}
					tally.mu.Unlock()
					return
				case a.str("code") == "MUTATION_UNKNOWN", a.str("code") == "BACKEND_UNAVAILABLE", a.str("code") == "RESOURCE_BUSY":
					if id := a.str("receiptId"); id != "" && a.str("code") == "BACKEND_UNAVAILABLE" {
						// The admission may have committed, nothing was
						// forwarded: the gateway settles it NOT_APPLIED.
						notForwarded[id] = true
					}
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
	// Readers: lists and state reads must answer 503, not 500, while the
	// store is down. They read writer 0's receipts and resource only (a read
	// proves a PENDING receipt from its object).
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for !stop.Load() {
			for _, path := range []string{"/v1/receipts?operationId=op-burst-0", "/v1/resources/local/burst/0", "/v1/unknown", "/v1/quarantine"} {
				if a, err := p.tryDo("GET", path, "token-a", nil, ""); err == nil {
					tally.record(a)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	defer func() { // also when the test fails early: no writer outlives it
		stop.Store(true)
		quit.Store(true)
		wg.Wait()
		readers.Wait()
	}()
	answers := func() string { // for a failure message, while the writers may still run
		tally.mu.Lock()
		defer tally.mu.Unlock()
		return fmt.Sprint(tally.answers)
	}
	waitAccepted := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for tally.accepted.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("only %d writes accepted, want %d; answers %s", tally.accepted.Load(), n, answers())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	left := func() int {
		tally.mu.Lock()
		defer tally.mu.Unlock()
		return len(tally.leftUnknown)
	}
	// Restart Postgres under the burst until a writer was answered
	// MUTATION_UNKNOWN (most restarts give several; a few give none).
	const maxRestarts = 5
	waitAccepted(writers * 5)
	var back time.Time
	for restarts := 1; ; restarts++ {
		if crash {
			pg.Kill()
			pg.Start()
		} else {
			pg.Restart()
		}
		back = time.Now()
		before := tally.accepted.Load()
		waitAccepted(before + writers*5) // writer 0 goes on alone if the others stopped
		if left() > 0 {
			t.Logf("%d restart(s) of Postgres", restarts)
			break
		}
		if restarts == maxRestarts {
			t.Fatalf("no writer was answered MUTATION_UNKNOWN in %d restarts (answers %s): the background settle retry was not exercised", restarts, answers())
		}
	}
	stop.Store(true)
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(time.Minute):
		t.Fatal("the writers did not end on an accepted write within a minute of the stop")
	}
	readers.Wait()

	tally.mu.Lock()
	defer tally.mu.Unlock()

	// Poll Postgres itself (rawPostgres, not the gateway, whose reads would
	// settle a PENDING receipt) for receipts not settled.
	states := func() map[string]string {
		out := map[string]string{}
		for id, r := range rawPostgres(t, pg.URL()).receipts {
			out[id], _ = r["state"].(string)
		}
		return out
	}
	unsettled := func(st map[string]string) (ids []string) {
		for id, s := range st {
			if s == string(fencegate.ReceiptPending) || s == string(fencegate.ReceiptUnknown) {
				ids = append(ids, id+" "+s)
			}
		}
		return ids
	}
	var st map[string]string
	deadline := back.Add(time.Minute)
	for {
		st = states()
		if len(unsettled(st)) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("answers %v; %d transport errors; %d receipts (%d answered 200, %d MUTATION_UNKNOWN left to the gateway); all settled %s after Postgres was back",
		tally.answers, tally.transportErrors, len(st), len(tally.committed), len(tally.leftUnknown), time.Since(back).Round(time.Millisecond))
	if open := unsettled(st); len(open) != 0 {
		t.Fatalf("%d of %d receipts still PENDING or UNKNOWN %s after Postgres came back: %v (left to the gateway after MUTATION_UNKNOWN: %v)",
			len(open), len(st), time.Since(back).Round(time.Second), open, tally.leftUnknown)
	}
	// The outcome the gateway knew for a settle that failed (its log line).
	known := map[string]string{}
	for _, line := range strings.Split(p.logs.String(), "\n") {
		if !strings.Contains(line, `msg="settle failed; retrying in the background"`) {
			continue
		}
		var id, state string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "receipt="); ok {
				id = v
			} else if v, ok := strings.CutPrefix(f, "state="); ok {
				state = v
			}
		}
		known[id] = state
	}
	for id, told := range tally.leftUnknown {
		want := string(told)
		if want == "" {
			want = known[id]
		}
		if want == "" {
			want = string(fencegate.ReceiptCommitted)
		}
		if st[id] != want {
			t.Errorf("receipt %s (MUTATION_UNKNOWN, left to the gateway) is %q in Postgres, want %s", id, st[id], want)
		}
	}
	for _, id := range tally.committed {
		if st[id] != string(fencegate.ReceiptCommitted) {
			t.Errorf("receipt %s was answered 200 but is %q in Postgres", id, st[id])
		}
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
