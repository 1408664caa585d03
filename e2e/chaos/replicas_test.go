package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// binary builds cmd/gateway once per test run, as users run it
// (testenv.GatewayBinary).
func binary(t *testing.T) string {
	t.Helper()
	return testenv.GatewayBinary(t)
}

// TestMain removes the binary built for the run.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

// freeAddr is a free loopback address (testenv.FreeAddr).
func freeAddr(t *testing.T) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

// replica is one `gateway serve` (or `gateway registry`) process: started,
// killed with SIGKILL and started again on the same address, config and data
// directory.
type replica struct {
	idx     int
	sub     string // the gateway subcommand: serve (default) or registry
	bin     string
	addr    string
	cfgPath string
	logPath string
	env     []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

// base is the replica's URL.
func (r *replica) base() string { return "http://" + r.addr }

// up reports whether the process is running (it may not serve yet).
func (r *replica) up() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return false
	}
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// start runs the process and waits until /healthz answers 200.
func (r *replica) start(ctx context.Context) error {
	r.mu.Lock()
	if r.cmd != nil {
		r.mu.Unlock()
		return fmt.Errorf("replica %d is running", r.idx)
	}
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	r.starts++
	fmt.Fprintf(logf, "=== start %d of replica %d at %s ===\n", r.starts, r.idx, time.Now().Format(time.RFC3339Nano))
	sub := r.sub
	if sub == "" {
		sub = "serve"
	}
	cmd := exec.Command(r.bin, sub, "--config", r.cfgPath, "--addr", r.addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), r.env...)
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		r.mu.Unlock()
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	r.cmd, r.exited = cmd, exited
	r.mu.Unlock()

	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := hc.Get(r.base() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			r.mu.Lock()
			r.cmd = nil
			r.mu.Unlock()
			return fmt.Errorf("replica %d exited during start (see %s)", r.idx, r.logPath)
		case <-ctx.Done():
			return fmt.Errorf("replica %d not healthy: %w (see %s)", r.idx, ctx.Err(), r.logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill sends SIGKILL (no shutdown: in-flight effects and receipts are left as
// a crash leaves them) and waits until the process is gone.
func (r *replica) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
	r.cmd = nil
}

// stop ends the process gracefully (SIGINT) and reports whether it exited
// cleanly within 30 s; a process that did not is killed.
func (r *replica) stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return nil
	}
	defer func() { r.cmd = nil }()
	select {
	case <-r.exited:
		return fmt.Errorf("replica %d had exited by itself: %v", r.idx, r.cmd.ProcessState)
	default:
	}
	_ = r.cmd.Process.Signal(os.Interrupt)
	select {
	case <-r.exited:
		if !r.cmd.ProcessState.Success() {
			return fmt.Errorf("replica %d exited uncleanly after SIGINT: %v", r.idx, r.cmd.ProcessState)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
		<-r.exited
		return fmt.Errorf("replica %d did not stop within 30s of SIGINT", r.idx)
	}
}

// replicaConfig is the config file of one gateway replica. The replicas run
// no registry: they trust the registry's trust bundle file (and reload it
// when the registry rotates its key); a replica in query mode asks the
// registry over HTTP. The fence state lives in one Postgres database.
type replicaConfig struct {
	DataDir, FenceStore, Store, Bundle, StatusMode, RegistryURL string
	Identities                                                  []string
	// DeferSettle is the replicas' deferSettle window ("0s": off).
	DeferSettle string
}

// identities is the YAML list of the workers' identities.
func identities(tokens []string) string {
	ids := ""
	for i, tok := range tokens {
		ids += fmt.Sprintf("  - {name: worker-%d, token: %s}\n", i, tok)
	}
	return ids
}

// queryToken is the credential query-mode replicas present to the registry.
const queryToken = "chaos-replica-query"

func (c replicaConfig) yaml() string {
	query := ""
	if c.StatusMode == "query" {
		query = fmt.Sprintf("registryURL: %s\nregistryCredential: {name: replica, token: %s}\n", c.RegistryURL, queryToken)
	}
	return fmt.Sprintf(`dataDir: %s
fenceStore: %q
stores:
  s3c: %q
trustBundle: %s
statusMode: %s
%seffectTimeout: 3s
deferSettle: %s
identities:
%saccess:
  rules:
    - {san: "worker-*", lease: [s3c]}
admins:
  - {name: ops, token: %s}
reconcile:
  interval: 200ms
  deadline: 15m
  orphan: 6s
`, c.DataDir, c.FenceStore, c.Store, c.Bundle, c.StatusMode, query, c.deferSettle(), identities(c.Identities), adminToken)
}

func (c replicaConfig) deferSettle() string {
	if c.DeferSettle == "" {
		return "0s"
	}
	return c.DeferSettle
}

// registryConfig is the config file of the one `gateway registry` process:
// leases on the etcd cluster, the gateways' fence store as the high-water
// mark of accepted fences (a detected loss resumes above it by itself).
type registryConfig struct {
	DataDir, FenceStore, Backend string
	Identities                   []string
}

func (c registryConfig) yaml() string {
	return fmt.Sprintf(`dataDir: %s
fenceStore: %q
effectTimeout: 3s
identities:
%sgateways:
  - {name: replica, token: %s}
access:
  rules:
    - {san: "worker-*", lease: [s3c]}
admins:
  - {name: ops, token: %s}
registry:
  backend: %q
  keyId: chaos-1
  issuerEpoch: 1
  statusLife: 3s
reconcile:
  interval: 200ms
  deadline: 15m
  orphan: 6s
`, c.DataDir, c.FenceStore, identities(c.Identities), queryToken, adminToken, c.Backend)
}
