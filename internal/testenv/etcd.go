package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// Etcd is a private single-member etcd owned by one test: its own random
// loopback client and peer ports and its own data directory under
// t.TempDir(). A test may kill it with SIGKILL, restart it, and restore it
// from an older snapshot (never the shared server on 2379). It is killed when
// the test ends.
type Etcd struct {
	t          testing.TB
	dir        string
	clientPort int
	peerPort   int
	p          proc
}

const etcdName = "fg-own"

// OwnEtcd starts a private etcd for t. Without etcd on PATH the test skips,
// and fails under CI=true.
func OwnEtcd(t testing.TB) *Etcd {
	t.Helper()
	bin := Tool(t, "etcd", "apt-get install etcd-server etcd-client")
	e := &Etcd{t: t, dir: t.TempDir()}
	t.Cleanup(e.p.kill)
	for attempt := 0; ; attempt++ {
		e.clientPort, e.peerPort = freePort(t), freePort(t)
		e.p = proc{argv: e.argv(bin), logPath: filepath.Join(e.dir, "etcd.log"), env: []string{"ETCD_UNSUPPORTED_ARCH=" + runtime.GOARCH}}
		err := e.start()
		if err == nil {
			return e
		}
		if attempt == 4 {
			t.Fatalf("own etcd: %v", err)
		}
		_ = os.RemoveAll(e.data())
	}
}

func (e *Etcd) data() string { return filepath.Join(e.dir, "data") }

func (e *Etcd) peerURL() string { return fmt.Sprintf("http://127.0.0.1:%d", e.peerPort) }

func (e *Etcd) argv(bin string) []string {
	return []string{bin, "--name", etcdName, "--data-dir", e.data(),
		"--listen-client-urls", e.Endpoint(), "--advertise-client-urls", e.Endpoint(),
		"--listen-peer-urls", e.peerURL(), "--initial-advertise-peer-urls", e.peerURL(),
		"--initial-cluster", etcdName + "=" + e.peerURL(), "--initial-cluster-state", "new",
		"--log-level", "warn"}
}

func (e *Etcd) start() error {
	if err := e.p.start(); err != nil {
		return err
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	err := e.p.waitFor(func() error {
		resp, err := hc.Get(e.Endpoint() + "/health")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("health %d", resp.StatusCode)
		}
		return nil
	})
	if err != nil {
		e.p.kill()
	}
	return err
}

// Endpoint is the client URL (http://127.0.0.1:PORT).
func (e *Etcd) Endpoint() string { return fmt.Sprintf("http://127.0.0.1:%d", e.clientPort) }

// Addr is the client host:port.
func (e *Etcd) Addr() string { return fmt.Sprintf("127.0.0.1:%d", e.clientPort) }

// Kill stops the member with SIGKILL and waits for it.
func (e *Etcd) Kill() { e.t.Helper(); e.p.kill() }

// Start starts a killed member again on the same ports and data directory.
func (e *Etcd) Start() {
	e.t.Helper()
	if err := e.start(); err != nil {
		e.t.Fatalf("own etcd: %v", err)
	}
}

// Snapshot saves a snapshot of the running member (etcdctl snapshot save)
// and returns its path, for Restore.
func (e *Etcd) Snapshot() string {
	e.t.Helper()
	snap := filepath.Join(e.dir, fmt.Sprintf("snapshot-%d.db", time.Now().UnixNano()))
	e.ctl("etcdctl", "--endpoints", e.Endpoint(), "snapshot", "save", snap)
	return snap
}

// Restore kills the member, replaces its data directory with one restored
// from snap (etcdutl snapshot restore, or etcdctl on etcd before 3.5: every
// later write is gone), and starts it again: the procedure etcd documents for
// disaster recovery of a one-member cluster.
func (e *Etcd) Restore(snap string) {
	e.t.Helper()
	e.Kill()
	if err := os.RemoveAll(e.data()); err != nil {
		e.t.Fatalf("own etcd: %v", err)
	}
	tool := "etcdutl"
	if _, err := exec.LookPath(tool); err != nil {
		tool = "etcdctl"
	}
	e.ctl(tool, "snapshot", "restore", snap, "--data-dir", e.data(), "--name", etcdName,
		"--initial-cluster", etcdName+"="+e.peerURL(), "--initial-advertise-peer-urls", e.peerURL())
	e.Start()
}

// ctl runs an etcd tool with ETCDCTL_API=3 and fails the test on error.
func (e *Etcd) ctl(name string, args ...string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("own etcd: %s %v: %v\n%s", name, args, err, out.String())
	}
}

// Log is the member's output so far, for failure messages.
func (e *Etcd) Log() string { return e.p.log() }
