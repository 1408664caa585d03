package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The cross-checks drive the same fenced writes as throughGateway (1 KiB
// bodies, one resource and grant per connection, segments 1, 2, 3 ...)
// without the project's client, to check its numbers from outside:
//
//   - wrk: Debian's wrk, a separate C program, with a Lua script holding
//     each connection's precomputed headers (one thread per connection, so
//     each thread's segments follow one another);
//   - http: plain net/http in this process, one goroutine per connection.
//
// Their leases are acquired with plain POST /v1/leases. A status proof lives
// 5 s (registry default), so a cross-check's window is at most checkMax
// after its leases were acquired.
const checkMax = 4 * time.Second

// checkWindow is the cross-check's window for a point's window d.
func checkWindow(d time.Duration) time.Duration { return min(d, checkMax) }

// fencedCred is one connection's precomputed write: its path and headers.
type fencedCred struct {
	path, grant, status string
}

// acquirePlain leases c fresh resources STORE/bench/TAG/W with plain HTTP.
func acquirePlain(ctx context.Context, base, store, tag string, c int) ([]fencedCred, error) {
	out := make([]fencedCred, c)
	for w := range c {
		key := fmt.Sprintf("bench/%s/%d", tag, w)
		body, _ := json.Marshal(map[string]any{"resource": store + "/" + key, "requestId": fmt.Sprintf("req-%s-%d", tag, w),
			"ttlMs": 3_600_000, "operationId": "op-" + tag})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/leases", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer token-bench")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		var m struct {
			Grant       string `json:"grant"`
			StatusProof string `json:"statusProof"`
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := json.Unmarshal(data, &m); err != nil || resp.StatusCode/100 != 2 || m.Grant == "" {
			return nil, fmt.Errorf("acquire %s: %d %.300s", key, resp.StatusCode, data)
		}
		out[w] = fencedCred{path: "/v1/objects/" + store + "/" + key, grant: m.Grant, status: m.StatusProof}
	}
	return out, nil
}

// plainHTTP is the http cross-check: c goroutines, each one connection,
// PUTs with headers built once per connection (only Fence-Segment changes).
func plainHTTP(ctx context.Context, gw *gateway, store, tag string, c int, d time.Duration) (sample, error) {
	creds, err := acquirePlain(ctx, gw.url, store, tag, c)
	if err != nil {
		return sample{}, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c, DisableCompression: true}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr}
	body := body1K
	hdrs := make([]http.Header, c)
	for w, cr := range creds {
		hdrs[w] = http.Header{"Authorization": {"Bearer token-bench"}, "Fence-Grant": {cr.grant}, "Fence-Status": {cr.status},
			"Content-Type": {"application/octet-stream"}, "Fence-Segment": {""}}
	}
	op := func(w, n int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, gw.url+creds[w].path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		h := hdrs[w]
		h["Fence-Segment"][0] = strconv.Itoa(n)
		req.Header = h
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("PUT %s segment %d: %d", creds[w].path, n, resp.StatusCode)
		}
		return nil
	}
	return runWorkers(ctx, c, d, counters{gw: gw}, func(int) error { return nil }, op)
}

// wrkScript is the wrk Lua script: thread i (numbered by setup) writes with
// credential i; done prints one line that wrkResult parses (latencies in
// µs). A write's segment is the number of answers so far + 1, not a count
// of request() calls: wrk calls request() once more on its first thread to
// inspect it, and a request lost to a socket error is sent again under its
// segment (a replay) rather than leaving a gap.
const wrkScript = `local n = 0
function setup(thread) n = n + 1; thread:set("me", n) end
function init(args)
  local c = creds[me]
  path, hdr, answers = c[1], {["Authorization"] = "Bearer token-bench", ["Fence-Grant"] = c[2], ["Fence-Status"] = c[3],
    ["Content-Type"] = "application/octet-stream"}, 0
  body = string.rep("0123456789abcdef", 64)
end
function request()
  hdr["Fence-Segment"] = tostring(answers + 1)
  return wrk.format("PUT", path, hdr, body)
end
function response(status, headers, body) answers = answers + 1 end
function done(s, lat, req)
  local e = s.errors
  io.write(string.format("LOADBENCH requests=%d non2xx=%d sockerr=%d us=%d p50=%d p99=%d\n", s.requests, e.status,
    e.connect + e.read + e.write + e.timeout, s.duration, lat:percentile(50), lat:percentile(99)))
end
`

var wrkRE = regexp.MustCompile(`LOADBENCH requests=(\d+) non2xx=(\d+) sockerr=(\d+) us=(\d+) p50=(\d+) p99=(\d+)`)

// viaWrk is the wrk cross-check: c threads of one connection each for d
// (rounded to whole seconds, at least 1).
// The sample's latencies are wrk's p50 and p99 only.
func viaWrk(ctx context.Context, gw *gateway, store, tag, dir string, c int, d time.Duration) (sample, error) {
	creds, err := acquirePlain(ctx, gw.url, store, tag, c)
	if err != nil {
		return sample{}, err
	}
	var lua strings.Builder
	lua.WriteString("creds = {\n")
	for _, cr := range creds {
		fmt.Fprintf(&lua, "  {%q, %q, %q},\n", cr.path, cr.grant, cr.status)
	}
	lua.WriteString("}\n" + wrkScript)
	script := filepath.Join(dir, "wrk-"+tag+".lua")
	if err := os.WriteFile(script, []byte(lua.String()), 0o600); err != nil {
		return sample{}, err
	}
	// wrk takes whole seconds.
	secs := strconv.Itoa(max(1, int(d.Round(time.Second)/time.Second)))
	cmd := exec.CommandContext(ctx, "wrk", "-t", strconv.Itoa(c), "-c", strconv.Itoa(c), "-d", secs+"s",
		"--timeout", "10s", "-s", script, gw.url+"/")
	before := counters{gw: gw}.read(ctx)
	out, err := cmd.CombinedOutput()
	after := counters{gw: gw}.read(ctx)
	if err != nil {
		return sample{}, fmt.Errorf("wrk: %v\n%s", err, out)
	}
	s, err := wrkSample(out, before, after, counters{gw: gw})
	if ps := cmd.ProcessState; ps != nil {
		s.self = ps.UserTime() + ps.SystemTime() // wrk's own CPU, start-up included
	}
	return s, err
}

// wrkSample is the sample wrk's done line reports, with the gateway's
// counters between before and after.
func wrkSample(out []byte, before, after snap, cnt counters) (sample, error) {
	m := wrkRE.FindSubmatch(out)
	if m == nil {
		return sample{}, fmt.Errorf("wrk: no LOADBENCH line in\n%s", out)
	}
	num := func(i int) int64 { v, _ := strconv.ParseInt(string(m[i]), 10, 64); return v }
	s := sample{window: time.Duration(num(4)) * time.Microsecond, errs: int(num(2) + num(3))}
	s.writes = int(num(1)) - int(num(2))
	s.quant = map[float64]time.Duration{0.5: time.Duration(num(5)) * time.Microsecond, 0.99: time.Duration(num(6)) * time.Microsecond}
	cnt.fill(&s, before, after)
	s.self = 0 // this process's CPU is not wrk's (viaWrk sets wrk's)
	return s, nil
}
