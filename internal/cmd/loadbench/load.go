package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	fgclient "github.com/fencegate/fencegate/client"
)

// sample is one measured point: writes and their latencies over a window,
// and what the counters moved by over it.
type sample struct {
	writes int
	window time.Duration
	lat    []time.Duration
	quant  map[float64]time.Duration // quantiles reported by another program, when lat is not known
	cpu    time.Duration             // gateway CPU over the window (0: not measured)
	self   time.Duration             // this process's CPU over the window (the load generator's, for the gateway paths)
	syncs  int                       // fsync-family calls of the gateway (-1: not measured)
	pg     pgDelta                   // Postgres counters (zero: not measured)
	pgcpu  pgCPUDelta                // Postgres server CPU and WAL over the window (zero: not measured)
	stages stages                    // the gateway's stage histograms over the window (zero: not measured)
	errs   int                       // answers that were not a success (the cross-checks count them; the client stops at one)
	// storeBytes is the embedded fence store's file size after the gateway
	// stopped (0: not measured).
	storeBytes int64
}

func (s sample) rate() float64 { return float64(s.writes) / s.window.Seconds() }

func (s sample) pct(p float64) time.Duration {
	if len(s.lat) == 0 {
		return s.quant[p]
	}
	slices.Sort(s.lat)
	return s.lat[min(len(s.lat)-1, int(float64(len(s.lat))*p))]
}

// counters reads what a sample reports moving; nil members are skipped.
// during, if set, runs beside the window (given its length) and is waited
// for before the window's counters are read: the profiles are taken there.
type counters struct {
	gw     *gateway
	pg     *pgStats
	pgcpu  *pgCPUProbe
	during func(d time.Duration)
}

type snap struct {
	cpu    time.Duration
	self   time.Duration
	syncs  int
	pg     pgCounters
	pgcpu  pgCPU
	stages stages
}

func (c counters) read(ctx context.Context) snap {
	var s snap
	s.syncs = -1
	if c.gw != nil {
		s.cpu, s.syncs = c.gw.cpu(), c.gw.syncs()
		s.stages = scrapeStages(c.gw.metrics)
	}
	s.self = selfCPU()
	if c.pg != nil {
		s.pg = c.pg.read(ctx)
	}
	if c.pgcpu != nil {
		s.pgcpu = c.pgcpu.read(ctx)
	}
	return s
}

func (c counters) fill(out *sample, a, b snap) {
	out.cpu = b.cpu - a.cpu
	out.self = b.self - a.self
	out.stages = b.stages.minus(a.stages)
	out.syncs = -1
	if a.syncs >= 0 && b.syncs >= 0 {
		out.syncs = b.syncs - a.syncs
	}
	if c.pg != nil {
		out.pg = b.pg.minus(a.pg)
	}
	if c.pgcpu != nil {
		out.pgcpu = b.pgcpu.minus(a.pgcpu)
		out.pgcpu.writes = out.writes
	}
}

// runWorkers runs c workers for d, each calling op(worker, n) with n = 1, 2,
// 3 ... until the window ends, after prepare(worker) for each.
func runWorkers(ctx context.Context, c int, d time.Duration, cnt counters,
	prepare func(w int) error, op func(w, n int) error) (sample, error) {
	for w := range c {
		if err := prepare(w); err != nil {
			return sample{}, err
		}
	}
	var (
		mu    sync.Mutex
		lat   []time.Duration
		first error
		wg    sync.WaitGroup
	)
	before := cnt.read(ctx)
	start := time.Now()
	end := start.Add(d)
	duringDone := make(chan struct{})
	go func() {
		defer close(duringDone)
		if cnt.during != nil {
			cnt.during(d)
		}
	}()
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for n := 1; time.Now().Before(end); n++ {
				t0 := time.Now()
				if err := op(w, n); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("worker %d write %d: %w", w, n, err)
					}
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	window := time.Since(start)
	<-duringDone
	after := cnt.read(ctx)
	if first != nil {
		return sample{}, first
	}
	s := sample{writes: len(lat), window: window, lat: lat}
	cnt.fill(&s, before, after)
	return s, nil
}

// body1K is the 1 KiB body every path writes (the gateway's, the baselines',
// the cross-checks'; wrkScript spells the same bytes): read, never written.
var body1K = bytes.Repeat([]byte("0123456789abcdef"), 64)

// throughGateway writes 1 KiB bodies through gw with the project's client:
// each worker holds one lease on its own resource STORE/bench/TAG/W and
// writes its segments 1, 2, 3 ... under that one grant.
func throughGateway(ctx context.Context, gw *gateway, store, tag string, c int, d time.Duration, cnt counters) (sample, error) {
	cl := fgclient.New(gw.url, "token-bench")
	body := body1K
	writers := make([]*fgclient.ObjectWriter, c)
	keys := make([]string, c)
	prepare := func(w int) error {
		keys[w] = fmt.Sprintf("bench/%s/%d", tag, w)
		var (
			l   *fgclient.Lease
			err error
		)
		// A store that already holds fences (-prefill) makes the fresh
		// registry pause grants until proofs from before could have expired.
		for try := 0; ; try++ {
			l, err = cl.AcquireLease(ctx, fgclient.LeaseParams{AcquireParams: fgclient.AcquireParams{
				Resource: store + "/" + keys[w], RequestID: "req-" + tag + fmt.Sprint(w), TTL: time.Hour, OperationID: "op-" + tag}})
			if fencegate.ErrorCode(err) != fencegate.CodeStateLost || try == 40 {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		writers[w] = l.Objects(store)
		return nil
	}
	op := func(w, n int) error {
		_, err := writers[w].Put(ctx, keys[w], bytes.NewReader(body), "application/octet-stream")
		return err
	}
	cnt.gw = gw
	return runWorkers(ctx, c, d, cnt, prepare, op)
}
