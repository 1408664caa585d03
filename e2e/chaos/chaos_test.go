package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/history"
	"github.com/fencegate/fencegate/internal/testenv"
)

var (
	flagDuration = flag.Duration("chaos.duration", 0, "how long faults are injected (default 45s, or FENCEGATE_CHAOS_DURATION)")
	flagSeed     = flag.Uint64("chaos.seed", 0, "seed of the workers' and the nemesis' choices (default random, or FENCEGATE_CHAOS_SEED)")
	flagWorkers  = flag.Int("chaos.workers", 0, "number of workers (default 6, or FENCEGATE_CHAOS_WORKERS)")
	flagStall    = flag.Bool("chaos.stall", false, "also stall S3 requests past the orphan grace (FENCEGATE_CHAOS_STALL=1; see README, Findings)")
)

// setting is the flag's value if set, else the environment variable's, else def.
func setting[T any](flagVal T, zero T, env string, parse func(string) (T, error), def T) T {
	if any(flagVal) != any(zero) {
		return flagVal
	}
	if s := os.Getenv(env); s != "" {
		if v, err := parse(s); err == nil {
			return v
		}
	}
	return def
}

// TestReplicasUnderChaosKeepTheFencingContract: three `gateway serve`
// replicas on one Postgres fence store and one S3 store, with a `gateway
// registry` on a three-member etcd cluster, serve workers through all three
// while replicas and the registry are killed with SIGKILL and restarted, links to Postgres and S3 get latency,
// resets and cuts, and etcd loses a member and its leader. Afterwards every
// UNKNOWN settles, no stale write was accepted, no receipt of a 2xx write is
// lost, no object holds a refused write's bytes, and each object is its last
// committed write.
func TestReplicasUnderChaosKeepTheFencingContract(t *testing.T) {
	dur := setting(*flagDuration, 0, "FENCEGATE_CHAOS_DURATION", time.ParseDuration, 45*time.Second)
	seed := setting(*flagSeed, 0, "FENCEGATE_CHAOS_SEED", func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }, rand.Uint64())
	workers := setting(*flagWorkers, 0, "FENCEGATE_CHAOS_WORKERS", strconv.Atoi, 6)
	t.Logf("chaos: %s of faults, seed %d, %d workers (FENCEGATE_CHAOS_DURATION, _SEED, _WORKERS to change)", dur, seed, workers)

	stall := setting(*flagStall, false, "FENCEGATE_CHAOS_STALL", strconv.ParseBool, false)
	pg := testenv.OwnPostgres(t) // a server of the test's own: the nemesis restarts it
	var own *testenv.Versitygw
	s3srv := testenv.S3Server(t)
	if stall {
		own = testenv.OwnVersitygw(t) // paused by the nemesis: never the shared one
		s3srv = own.S3
	}
	// The seed also picks whether the replicas defer their settles
	// (docs/deferred-settle.md): off, the default, or a window long enough
	// for kills to land inside it.
	deferSettle := setting("", "", "FENCEGATE_CHAOS_DEFER", func(s string) (string, error) { return s, nil }, []string{"0s", "300ms"}[seed%2])
	t.Logf("chaos: replicas' deferSettle %s (FENCEGATE_CHAOS_DEFER to change)", deferSettle)
	c := startCluster(t, clusterSpec{workers: workers, resources: 3, pgURL: pg.URL(), s3: s3srv, deferSettle: deferSettle})
	c.ownS3 = own
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("FENCEGATE_CHAOS_KEEP_LOGS") == "" {
			return
		}
		keep := filepath.Join(history.ArtifactDir(), fmt.Sprintf("%s-seed%d-logs", t.Name(), seed))
		for _, r := range append([]*replica{c.registry}, c.replicas...) {
			t.Logf("--- %s log (tail) ---\n%s", filepath.Base(r.logPath), tail(r.logPath, 60))
		}
		if err := keepLogs(keep, c); err == nil {
			t.Logf("replica and etcd logs kept in %s", keep)
		}
	})
	rng := rand.New(rand.NewPCG(seed, 0))
	// Faults run for dur and until each kind was injected once (at most 3×dur);
	// the workers run as long as the faults do.
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	hard, hardCancel := context.WithTimeout(context.Background(), 3*dur)
	defer hardCancel()
	load, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range workers {
		w := &worker{id: i, token: c.tokens[i], c: c, rng: rand.New(rand.NewPCG(seed, uint64(i+1)))}
		wg.Go(func() { w.run(load) })
	}
	wg.Go(func() { c.reader(load, workers) })
	faults := c.faults(pg, stall)
	nemErr := c.nemesis(ctx, hard, rng, faults)
	stopLoad()
	wg.Wait()
	if nemErr != nil {
		t.Errorf("nemesis: %v", nemErr)
	}

	// Everything is healed; the reconcilers settle what the faults left open.
	hctx, hcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer hcancel()
	for _, r := range append([]*replica{c.registry}, c.replicas...) {
		if !r.up() {
			if err := r.start(hctx); err != nil {
				t.Fatalf("%v\n%s", err, tail(r.logPath, 40))
			}
		}
	}
	for i := range testenv.EtcdClusterSize {
		if !c.etcd.Running(i) {
			if err := c.etcd.Start(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	settleStart := time.Now()
	receipts, open := c.settle(hctx, 90*time.Second)
	settleTook := time.Since(settleStart)
	final := map[string]string{}
	for _, res := range c.resources {
		v, err := c.s3.get(hctx, strings.TrimPrefix(res, storeName+"/"))
		if err != nil {
			t.Fatalf("read %s: %v", res, err)
		}
		final[res] = v
	}
	ops := c.journal.snapshot()
	v := c.judge(ops, receipts, open, final)
	nreceipts := 0
	for _, l := range receipts {
		nreceipts += len(l)
	}
	t.Logf("chaos run: %d operations, %d receipts, settled in %s\noperations:\n%sinjected:\n%sUNKNOWN answers settled as: %v",
		len(ops), nreceipts, settleTook.Round(time.Millisecond), summary(ops), c.counters(), v.settledUnknowns)
	// What the registry concluded about its backend through the etcd faults.
	if losses := grepLines(c.registry.logPath, "coordination state lost"); len(losses) > 0 {
		t.Logf("the registry detected %d coordination state losses (grants paused, epoch retired); first: %s",
			len(losses), losses[0])
	}
	if errs := grepLines(c.registry.logPath, "level=ERROR"); len(errs) > 0 {
		t.Logf("the registry logged %d errors; first: %s", len(errs), errs[0])
	}
	for name, list := range v.failures() {
		t.Logf("%s: %d", name, len(list))
		if len(list) > 0 {
			t.Errorf("%s: %d, first: %s", name, len(list), strings.Join(list[:min(len(list), 10)], "\n  "))
		}
	}
	// What the clients saw is a linearizable history of a fenced register
	// per resource.
	file := filepath.Join(history.ArtifactDir(), strings.NewReplacer("/", "_").Replace(t.Name())+fmt.Sprintf("-seed%d.html", seed))
	lin, err := history.Check(operations(ops, v.settled), 2*time.Minute, file)
	switch {
	case err != nil:
		t.Errorf("history check: %v", err)
	case lin.TimedOut:
		t.Errorf("linearizability check of %d operations timed out; visualisation: %s", lin.Operations, lin.Visualization)
	case !lin.Linearizable:
		for _, res := range c.resources {
			var part []*op
			for _, o := range ops {
				if o.resource == res {
					part = append(part, o)
				}
			}
			if r, err := history.Check(operations(part, v.settled), time.Minute, ""); err == nil && !r.Linearizable {
				t.Logf("resource %s: not linearizable; the shortest failing prefix ends with:\n%s", res, shortestFailingPrefix(part, v.settled))
			}
		}
		txt := strings.TrimSuffix(file, ".html") + ".txt"
		if err := dump(txt, ops, v.settled); err != nil {
			t.Logf("dump journal: %v", err)
		}
		t.Errorf("history of %d operations is not linearizable for a fenced register; visualisation: %s, journal: %s",
			lin.Operations, lin.Visualization, txt)
	default:
		t.Logf("history of %d operations is linearizable (porcupine, fenced register per resource)", lin.Operations)
	}
	// The run must have done something worth checking.
	ok := 0
	for _, o := range ops {
		if o.kind == history.Write && o.out == history.OK {
			ok++
		}
	}
	if ok == 0 {
		t.Errorf("no write was accepted in %s", dur)
	}
	for _, f := range faults {
		if c.injections(f.name) == 0 {
			t.Errorf("fault %q was never injected (in %s)", f.name, 3*dur)
		}
	}
}
