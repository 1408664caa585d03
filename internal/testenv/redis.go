package testenv

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Redis is a private redis-server owned by one test: its own random loopback
// port and its own directory under t.TempDir(). A test may kill it with
// SIGKILL, restart it empty, or restore it from an older RDB dump (never the
// shared server on 6379). It is killed when the test ends.
type Redis struct {
	t       testing.TB
	dir     string
	port    int
	durable bool
	p       proc
}

// RedisOption configures OwnRedis.
type RedisOption func(*Redis)

// RedisDurable runs the server with appendonly yes and appendfsync always:
// every write is on disk before it is answered, so a kill -9 loses nothing.
// Without it the server keeps nothing on disk unless a test calls Save.
func RedisDurable() RedisOption { return func(r *Redis) { r.durable = true } }

// OwnRedis starts a private redis-server for t on a free loopback port.
// Without redis-server on PATH the test skips, and fails under CI=true.
func OwnRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	bin := Tool(t, "redis-server", "apt-get install redis-server")
	r := &Redis{t: t, dir: t.TempDir()}
	for _, o := range opts {
		o(r)
	}
	t.Cleanup(r.p.kill)
	for attempt := 0; ; attempt++ {
		r.port = freePort(t)
		r.p = proc{argv: r.argv(bin), logPath: filepath.Join(r.dir, "redis.log")}
		err := r.start()
		if err == nil {
			return r
		}
		if attempt == 4 {
			t.Fatalf("own redis: %v", err)
		}
	}
}

func (r *Redis) argv(bin string) []string {
	aof, fsync := "no", "everysec"
	if r.durable {
		aof, fsync = "yes", "always"
	}
	// save "": no background snapshots, so the only RDB on disk is what Save wrote.
	return []string{bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--dbfilename", "dump.rdb", "--save", "", "--appendonly", aof, "--appendfsync", fsync,
		"--protected-mode", "no", "--daemonize", "no"}
}

func (r *Redis) start() error {
	if err := r.p.start(); err != nil {
		return err
	}
	if err := r.p.waitFor(func() error { _, err := r.Do("PING"); return err }); err != nil {
		r.p.kill()
		return err
	}
	return nil
}

// Addr is the server's host:port.
func (r *Redis) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// Dir is the server's working directory (dump.rdb, appendonlydir).
func (r *Redis) Dir() string { return r.dir }

// Kill stops the server with SIGKILL, the way a crash does, and waits for it.
func (r *Redis) Kill() { r.t.Helper(); r.p.kill() }

// Start starts a killed server again on the same port and directory: it loads
// whatever it had on disk (with RedisDurable, everything; otherwise the last
// Save or nothing).
func (r *Redis) Start() {
	r.t.Helper()
	if err := r.start(); err != nil {
		r.t.Fatalf("own redis: %v", err)
	}
}

// RestartEmpty kills the server, removes every file it keeps, and starts it
// again with no data: a cache-configured Redis restarting, or a failover to
// an empty replica.
func (r *Redis) RestartEmpty() {
	r.t.Helper()
	r.Kill()
	r.wipe()
	r.Start()
}

// Save writes an RDB dump synchronously (SAVE) and copies it aside; the
// returned path is for RestoreRDB.
func (r *Redis) Save() string {
	r.t.Helper()
	if got, err := r.Do("SAVE"); err != nil || got != "OK" {
		r.t.Fatalf("own redis: SAVE: %q %v", got, err)
	}
	snap := filepath.Join(r.dir, fmt.Sprintf("snapshot-%d.rdb", time.Now().UnixNano()))
	if err := copyFile(filepath.Join(r.dir, "dump.rdb"), snap); err != nil {
		r.t.Fatalf("own redis: %v", err)
	}
	return snap
}

// RestoreRDB kills the server, replaces its data with the dump at snap (an
// older RDB: every later write is gone), and starts it again.
func (r *Redis) RestoreRDB(snap string) {
	r.t.Helper()
	r.Kill()
	r.wipe()
	if err := copyFile(snap, filepath.Join(r.dir, "dump.rdb")); err != nil {
		r.t.Fatalf("own redis: %v", err)
	}
	if r.durable { // with AOF on, Redis would start from the (empty) AOF: load the RDB, then turn AOF on
		r.durable = false
		r.p.argv = r.argv(r.p.argv[0])
		r.Start()
		r.durable = true
		r.p.argv = r.argv(r.p.argv[0])
		if got, err := r.Do("CONFIG", "SET", "appendonly", "yes"); err != nil || got != "OK" {
			r.t.Fatalf("own redis: enable AOF after restore: %q %v", got, err)
		}
		return
	}
	r.Start()
}

func (r *Redis) wipe() {
	for _, name := range []string{"dump.rdb", "appendonlydir", "appendonly.aof"} {
		if err := os.RemoveAll(filepath.Join(r.dir, name)); err != nil {
			r.t.Fatalf("own redis: %v", err)
		}
	}
}

// Do sends one command (inline protocol, arguments without spaces) and
// returns a simple-string, integer or bulk reply as text; an error reply is
// an error.
func (r *Redis) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", r.Addr(), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c, "%s\r\n", strings.Join(args, " ")); err != nil {
		return "", err
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case line == "":
		return "", fmt.Errorf("empty reply")
	case line[0] == '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case line[0] == '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case line[0] == '*':
		return line, nil // arrays are not decoded; tests use scalar commands
	}
	return line[1:], nil
}

// ReplicaOf makes r a replica of master (REPLICAOF) and waits until its link
// to master is up and the initial sync done.
func (r *Redis) ReplicaOf(master *Redis) {
	r.t.Helper()
	if _, err := r.Do("REPLICAOF", "127.0.0.1", strconv.Itoa(master.port)); err != nil {
		r.t.Fatalf("own redis: REPLICAOF: %v", err)
	}
	if err := r.p.waitFor(func() error {
		info, err := r.info("replication")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") || strings.Contains(info, "master_sync_in_progress:1") {
			return fmt.Errorf("replica of %s not in sync yet", master.Addr())
		}
		return nil
	}); err != nil {
		r.t.Fatalf("own redis: %v", err)
	}
}

// Freeze stops the server's process (SIGSTOP) without closing its
// connections: a replica that stops acknowledging, as a stalled or
// partitioned one does. Thaw resumes it.
func (r *Redis) Freeze() { r.t.Helper(); r.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (r *Redis) Thaw() { r.t.Helper(); r.signal(syscall.SIGCONT) }

func (r *Redis) signal(sig syscall.Signal) {
	if r.p.cmd == nil {
		r.t.Fatalf("own redis: not running")
	}
	if err := r.p.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("own redis: %v: %v", sig, err)
	}
}

// info is INFO section's text.
func (r *Redis) info(section string) (string, error) {
	c, err := net.DialTimeout("tcp", r.Addr(), 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "INFO %s\r\n", section); err != nil {
		return "", err
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if err != nil {
		return "", fmt.Errorf("INFO reply %q", line)
	}
	buf := make([]byte, n+2)
	if _, err := io.ReadFull(br, buf); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
