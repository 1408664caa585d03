package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/loopback"
)

// gateway is one started gateway process, optionally under strace counting
// its fsync-family calls.
type gateway struct {
	url     string
	metrics string // the operator listener's base URL (/metrics, /debug/pprof/ with pprof)
	cmd     *exec.Cmd
	pid     int    // the gateway's own process ID (under strace: the child's)
	trace   string // strace output file, "" when not traced
	logf    *os.File
	stderr  string
}

// gwSpec is how to start one gateway.
type gwSpec struct {
	bin, dir string
	env      []string
	strace   bool // count fsync-family calls under strace
	pprof    bool // serve /debug/pprof/ on the operator listener
	// serve runs `gateway serve --config` with a config file as an operator
	// writes one (access rules, an in-process registry) instead of `gateway
	// dev`; fenceStore is its fence store ("" for embedded).
	serve      bool
	fenceStore string
	args       []string // further flags
	// extraConfig is YAML added to the gateway's config file (dev gets one
	// with only these lines), e.g. "deferSettle: 2ms"; "" for none.
	extraConfig string
}

// serveConfig is the `gateway serve` configuration of the bench: what
// `gateway dev` implies (an in-process embedded registry, a local object
// store named local), written out, with access rules instead of dev's open
// policy. Every other setting is the default both share (config.Default).
const serveConfig = `# loadbench: gateway serve with an in-process registry (README "Registry and operators")
stores: {local: "local:"}
identities:
  - {name: bench, token: token-bench}
access:
  rules:
    - {identity: bench, lease: ["local/*"], read: [local]}
registry: {backend: embedded, keyId: bench-1, issuerEpoch: 1}
`

// startGateway runs the gateway of sp on free loopback ports (the API and
// the operator listener) and waits for /healthz. With strace, it runs under
// strace -f --seccomp-bpf (only the traced calls stop, so the cost is small)
// writing the calls to a file.
func startGateway(ctx context.Context, sp gwSpec) (*gateway, error) {
	addr, err := loopback.FreeAddr()
	if err != nil {
		return nil, err
	}
	maddr, err := loopback.FreeAddr()
	if err != nil {
		return nil, err
	}
	g := &gateway{url: "http://" + addr, metrics: "http://" + maddr}
	logf, err := os.Create(filepath.Join(sp.dir, "gateway.log"))
	if err != nil {
		return nil, err
	}
	g.logf, g.stderr = logf, logf.Name()
	full := []string{"dev", "--identity", "bench=token-bench"}
	if sp.serve || sp.extraConfig != "" {
		cfg := filepath.Join(sp.dir, "gateway.yaml")
		text := sp.extraConfig + "\n"
		if sp.serve {
			text = serveConfig + text
		}
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			return nil, err
		}
		if sp.serve {
			full = []string{"serve", "--config", cfg}
		} else {
			full = append(full, "--config", cfg)
		}
	}
	full = append(full, "--addr", addr, "--metrics-addr", maddr, "--data-dir", filepath.Join(sp.dir, "data"))
	if sp.fenceStore != "" {
		full = append(full, "--fence-store", sp.fenceStore)
	}
	if sp.pprof {
		full = append(full, "--pprof")
	}
	full = append(full, sp.args...)
	bin := sp.bin
	if sp.strace {
		g.trace = filepath.Join(sp.dir, "strace.out")
		full = append([]string{"-f", "-qq", "--seccomp-bpf", "-e", "trace=fsync,fdatasync,sync_file_range,syncfs",
			"-e", "signal=none", "-o", g.trace, bin}, full...)
		bin = "strace"
	}
	g.cmd = exec.Command(bin, full...)
	g.cmd.Env = append(os.Environ(), sp.env...)
	g.cmd.Stdout, g.cmd.Stderr = logf, logf
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.cmd.Start(); err != nil {
		return nil, err
	}
	if err := g.waitHealthy(ctx, 30*time.Second); err != nil {
		return nil, fmt.Errorf("gateway %w", err)
	}
	g.pid = g.cmd.Process.Pid
	if sp.strace {
		g.pid = childOf(g.pid)
	}
	return g, nil
}

// waitHealthy polls g's /healthz until it answers 200; after within, when
// ctx ends or the process has exited, it stops g and returns an error with
// the end of its log.
func (g *gateway) waitHealthy(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(g.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil || g.cmd.ProcessState != nil {
			g.stop()
			log, _ := os.ReadFile(g.stderr)
			return fmt.Errorf("did not become healthy: %s", tail(string(log), 2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (g *gateway) stop() {
	if g.cmd.Process != nil {
		_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = g.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	_ = g.logf.Close()
}

// cpu is the gateway's user+system CPU time so far (/proc/PID/stat).
func (g *gateway) cpu() time.Duration {
	own, _ := statTimes(g.pid)
	return own
}

// syncs counts the fsync-family calls traced so far (-1 when not traced).
func (g *gateway) syncs() int {
	if g.trace == "" {
		return -1
	}
	f, err := os.Open(g.trace)
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if !strings.Contains(l, "resumed>") && (strings.Contains(l, "sync(") || strings.Contains(l, "sync_file_range(") || strings.Contains(l, "syncfs(")) {
			n++
		}
	}
	return n
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
