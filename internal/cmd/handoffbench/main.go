// Command handoffbench measures lock handoff latency through a running
// gateway: from the moment the old lease ends (release, or TTL expiry) to the
// first write the new owner gets accepted, with the new owner long-polling
// POST /v1/leases. It prints p50/p99 per kind and, as a baseline measured in
// the same run, an uncontended acquire followed by its first write. With
// -metrics it also prints the gateway's own fencegate_lock_handoff_seconds.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

type bench struct {
	url  string
	a, b string // bearer tokens of the two workers
	hc   *http.Client
}

type leaseAnswer struct {
	Lease       string    `json:"lease"`
	Grant       string    `json:"grant"`
	StatusProof string    `json:"statusProof"`
	ExpiresAt   time.Time `json:"expiresAt"`
}

func (b *bench) call(method, path, token string, hdr map[string]string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, b.url+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

func (b *bench) acquire(token, resource, reqID string, ttl, wait time.Duration) (leaseAnswer, error) {
	body, _ := json.Marshal(map[string]any{"resource": resource, "requestId": reqID, "ttlMs": ttl.Milliseconds(),
		"operationId": "handoff", "waitMs": wait.Milliseconds()})
	code, out, err := b.call("POST", "/v1/leases", token, map[string]string{"Content-Type": "application/json"}, body)
	var la leaseAnswer
	if err == nil && code != http.StatusCreated {
		err = fmt.Errorf("acquire: %d %s", code, out)
	}
	if err == nil {
		err = json.Unmarshal(out, &la)
	}
	return la, err
}

func (b *bench) write(token, resource string, la leaseAnswer) error {
	code, out, err := b.call("PUT", "/v1/objects/"+resource, token, map[string]string{
		"Fence-Grant": la.Grant, "Fence-Status": la.StatusProof, "Fence-Segment": "1"}, []byte("x"))
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("write: %d %s", code, out)
	}
	return err
}

// handoff runs one handoff on resource and returns old-lease-end → accepted write.
func (b *bench) handoff(resource string, i int, expire bool) (time.Duration, error) {
	ttl := 30 * time.Second
	if expire {
		ttl = 150 * time.Millisecond
	}
	old, err := b.acquire(b.a, resource, resource+"/a", ttl, 0)
	if err != nil {
		return 0, err
	}
	var (
		wg       sync.WaitGroup
		accepted time.Time
		werr     error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		la, err := b.acquire(b.b, resource, resource+"/b", 30*time.Second, 10*time.Second)
		if err == nil {
			err = b.write(b.b, resource, la)
		}
		accepted, werr = time.Now(), err
		if err == nil {
			_, _, _ = b.call("DELETE", "/v1/leases/"+la.Lease, b.b, nil, nil)
		}
	}()
	time.Sleep(20 * time.Millisecond) // let B start waiting
	var ended time.Time
	if expire {
		ended = old.ExpiresAt
	} else {
		ended = time.Now()
		if code, out, err := b.call("DELETE", "/v1/leases/"+old.Lease, b.a, nil, nil); err != nil || code != 200 {
			return 0, fmt.Errorf("release: %d %s %v", code, out, err)
		}
	}
	wg.Wait()
	return accepted.Sub(ended), werr
}

// baseline is an uncontended acquire and first write.
func (b *bench) baseline(resource string, i int) (time.Duration, error) {
	start := time.Now()
	la, err := b.acquire(b.b, resource, resource+"/base", 30*time.Second, 0)
	if err == nil {
		err = b.write(b.b, resource, la)
	}
	d := time.Since(start)
	if err == nil {
		_, _, _ = b.call("DELETE", "/v1/leases/"+la.Lease, b.b, nil, nil)
	}
	return d, err
}

func pct(ds []time.Duration, p float64) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}

func main() {
	b := &bench{hc: &http.Client{Timeout: 30 * time.Second}}
	flag.StringVar(&b.url, "gateway", "http://127.0.0.1:8080", "gateway URL")
	flag.StringVar(&b.a, "token-a", "token-a", "bearer token of the first worker")
	flag.StringVar(&b.b, "token-b", "token-b", "bearer token of the second worker")
	n := flag.Int("n", 50, "handoffs per kind")
	metrics := flag.String("metrics", "", "the gateway's /metrics URL (operator listener): print its own handoff histogram too")
	flag.Parse()
	run := func(name string, f func(i int) (time.Duration, error)) []time.Duration {
		var ds []time.Duration
		for i := range *n {
			d, err := f(i)
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s #%d: %v\n", name, i, err)
				os.Exit(1)
			}
			ds = append(ds, d)
		}
		return ds
	}
	stamp := time.Now().UnixNano()
	base := run("baseline", func(i int) (time.Duration, error) {
		return b.baseline(fmt.Sprintf("local/bench-%d/base-%d", stamp, i), i)
	})
	rel := run("release", func(i int) (time.Duration, error) {
		return b.handoff(fmt.Sprintf("local/bench-%d/rel-%d", stamp, i), i, false)
	})
	exp := run("expiry", func(i int) (time.Duration, error) {
		return b.handoff(fmt.Sprintf("local/bench-%d/exp-%d", stamp, i), i, true)
	})
	bp50 := pct(base, 0.5)
	fmt.Printf("%-28s %10s %10s %12s\n", "kind", "p50", "p99", "p50/baseline")
	for _, row := range []struct {
		name string
		ds   []time.Duration
	}{{"baseline (acquire+write)", base}, {"handoff after release", rel}, {"handoff after TTL expiry", exp}} {
		p50, p99 := pct(row.ds, 0.5), pct(row.ds, 0.99)
		fmt.Printf("%-28s %10s %10s %11.2fx\n", row.name, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), float64(p50)/float64(bp50))
	}
	if *metrics != "" {
		printServer(*metrics)
	}
}
