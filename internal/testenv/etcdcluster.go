package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdCluster is a private three-member etcd cluster owned by one test: each
// member has its own data directory and random loopback client and peer
// ports. A test may kill members (SIGKILL), start them again on the same data
// and ports, and move the leadership; it never touches the shared etcd on 2379.
// Every member is killed and the directory removed when the test ends.
//
// The methods other than OwnEtcdCluster return errors instead of failing the
// test, so a fault injector may call them from any goroutine.
type EtcdCluster struct {
	bin     string
	dir     string
	token   string
	members []*etcdMember
}

type etcdMember struct {
	name, client, peer string // client and peer are host:port
	mu                 sync.Mutex
	cmd                *exec.Cmd
	exited             chan struct{}
}

// EtcdClusterSize is the number of members OwnEtcdCluster starts.
const EtcdClusterSize = 3

// OwnEtcdCluster starts a three-member etcd cluster (the etcd binary on PATH,
// or FENCEGATE_TEST_ETCD_BIN) and waits until it has a leader and serves a
// linearizable read. Without an etcd binary the test skips, and fails under
// CI=true (scripts/services.sh installs Debian's etcd-server).
func OwnEtcdCluster(t testing.TB) *EtcdCluster {
	t.Helper()
	bin := os.Getenv("FENCEGATE_TEST_ETCD_BIN")
	if bin == "" {
		bin, _ = exec.LookPath("etcd")
	}
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("no etcd binary (PATH or FENCEGATE_TEST_ETCD_BIN): the suite must run in CI")
		}
		t.Skip("no etcd binary; install etcd-server or set FENCEGATE_TEST_ETCD_BIN")
	}
	dir, err := os.MkdirTemp("", "fg-etcd-cluster-")
	if err != nil {
		t.Fatalf("etcd cluster: %v", err)
	}
	c := &EtcdCluster{bin: bin, dir: dir, token: RandomName("fg-")}
	t.Cleanup(func() {
		for i := range c.members {
			_ = c.Kill(i)
		}
		_ = os.RemoveAll(dir)
	})
	for i := range EtcdClusterSize { // members restart on their ports: loopback.FreeAddr's
		c.members = append(c.members, &etcdMember{name: fmt.Sprintf("m%d", i), client: FreeAddr(t), peer: FreeAddr(t)})
	}
	for i := range c.members {
		if err := c.Start(i); err != nil {
			t.Fatalf("etcd cluster: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("etcd cluster: %v\n%s", err, c.Logs())
	}
	return c
}

// Endpoints are the members' client addresses (host:port).
func (c *EtcdCluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.client
	}
	return out
}

func (c *EtcdCluster) initialCluster() string {
	var parts []string
	for _, m := range c.members {
		parts = append(parts, m.name+"=http://"+m.peer)
	}
	return strings.Join(parts, ",")
}

// Start starts member i (again), on its own data directory and ports. A
// member that already has data rejoins the cluster it belongs to; etcd
// ignores the initial-cluster flags then.
func (c *EtcdCluster) Start(i int) error {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return fmt.Errorf("etcd member %s is running", m.name)
	}
	logf, err := os.OpenFile(filepath.Join(c.dir, m.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(c.bin,
		"--name", m.name, "--data-dir", filepath.Join(c.dir, m.name),
		"--listen-client-urls", "http://"+m.client, "--advertise-client-urls", "http://"+m.client,
		"--listen-peer-urls", "http://"+m.peer, "--initial-advertise-peer-urls", "http://"+m.peer,
		"--initial-cluster", c.initialCluster(), "--initial-cluster-token", c.token,
		"--initial-cluster-state", "new",
		// Loopback on a loaded two-core machine: etcd's defaults (100 ms, 1 s).
		"--heartbeat-interval", "100", "--election-timeout", "1000")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd member %s: %w", m.name, err)
	}
	m.cmd, m.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(m.exited)
	return nil
}

// Kill kills member i with SIGKILL (no shutdown, as a crash) and waits until
// it is gone. Killing a stopped member does nothing.
func (c *EtcdCluster) Kill(i int) error {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return nil
	}
	_ = m.cmd.Process.Signal(syscall.SIGKILL)
	<-m.exited
	m.cmd = nil
	return nil
}

// Running reports whether member i has been started and not killed.
func (c *EtcdCluster) Running(i int) bool {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cmd != nil
}

// memberStatus asks member i for its status: its own ID and its leader's.
func (c *EtcdCluster) memberStatus(ctx context.Context, i int) (*clientv3.StatusResponse, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.members[i].client}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	return cli.Status(ctx, c.members[i].client)
}

// Leader returns the index of the member the running members agree leads.
func (c *EtcdCluster) Leader(ctx context.Context) (int, error) {
	ids := map[uint64]int{}
	var leader uint64
	for i := range c.members {
		if !c.Running(i) {
			continue
		}
		st, err := c.memberStatus(ctx, i)
		if err != nil {
			continue
		}
		ids[st.Header.MemberId] = i
		if st.Leader != 0 {
			leader = st.Leader
		}
	}
	if i, ok := ids[leader]; ok && leader != 0 {
		return i, nil
	}
	return -1, errors.New("etcd cluster: no running member leads")
}

// MoveLeader hands the leadership to member to: the MoveLeader maintenance
// call (what `etcdctl move-leader` sends), addressed to the current leader as
// etcd requires. It returns once the leader has accepted the transfer.
func (c *EtcdCluster) MoveLeader(ctx context.Context, to int) error {
	lead, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	if lead == to {
		return nil
	}
	st, err := c.memberStatus(ctx, to)
	if err != nil {
		return fmt.Errorf("etcd cluster: status of member %d: %w", to, err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.members[lead].client}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.MoveLeader(ctx, st.Header.MemberId); err != nil {
		return fmt.Errorf("etcd cluster: move leader %d -> %d: %w", lead, to, err)
	}
	return nil
}

// WaitHealthy waits until the cluster has a leader and a linearizable read
// through all client endpoints succeeds.
func (c *EtcdCluster) WaitHealthy(ctx context.Context) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cli.Get(rctx, "health")
		cancel()
		if err == nil {
			if _, err = c.Leader(ctx); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd cluster not healthy: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Logs returns every member's log so far (for failure messages).
func (c *EtcdCluster) Logs() string {
	var b strings.Builder
	for _, m := range c.members {
		data, _ := os.ReadFile(filepath.Join(c.dir, m.name+".log"))
		fmt.Fprintf(&b, "--- etcd %s ---\n%s\n", m.name, data)
	}
	return b.String()
}
