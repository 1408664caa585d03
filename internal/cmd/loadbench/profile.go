package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// traceFor is how long the execution trace of a point runs (at most the
// window): a few seconds of trace at c=32 are already tens of MB.
const traceFor = 3 * time.Second

// profileWindow is when, within a window of d, the CPU profile and the
// execution trace run: the CPU profile over the middle half of the window
// (whole seconds, as /debug/pprof/profile takes them; at least 1 s), the
// trace for traceFor (or the window) centred in it.
func profileWindow(d time.Duration) (cpuAt, cpuFor, trAt, trFor time.Duration) {
	cpuFor = max(time.Second, (d / 2).Truncate(time.Second))
	cpuAt = max(0, (d-cpuFor)/2)
	trFor = min(traceFor, d)
	trAt = max(0, (d-trFor)/2)
	return
}

// profiler takes, from a gateway started with pprof, a CPU profile, the
// allocations made over the same seconds (a delta of /debug/pprof/allocs:
// `go tool pprof -sample_index=alloc_space`) and an execution trace within
// each window it is used for (counters.during), saved as dir/name.cpu,
// dir/name.allocs and dir/name.trace. err is the first failure.
type profiler struct {
	gw        *gateway
	dir, name string
	mu        sync.Mutex
	err       error
}

func (p *profiler) during(d time.Duration) {
	cpuAt, cpuFor, trAt, trFor := profileWindow(d)
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(cpuAt)
		p.fail(p.fetch(fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(cpuFor/time.Second)), p.name+".cpu"))
	})
	wg.Go(func() {
		time.Sleep(cpuAt)
		p.fail(p.fetch(fmt.Sprintf("/debug/pprof/allocs?seconds=%d", int(cpuFor/time.Second)), p.name+".allocs"))
	})
	wg.Go(func() {
		time.Sleep(trAt)
		p.fail(p.fetch(fmt.Sprintf("/debug/pprof/trace?seconds=%g", trFor.Seconds()), p.name+".trace"))
	})
	wg.Wait()
}

func (p *profiler) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

// fetch saves the operator listener's answer to path as file.
func (p *profiler) fetch(path, file string) error {
	cl := http.Client{Timeout: time.Minute}
	resp, err := cl.Get(p.gw.metrics + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 500))
		return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	f, err := os.Create(filepath.Join(p.dir, file))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
