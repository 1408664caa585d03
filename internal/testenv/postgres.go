package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a private PostgreSQL server owned by one test: its own data
// directory, its own random loopback port, its own Unix socket directory. A
// test may stop, kill and restart it freely (never the shared server on 5432).
// It is stopped and its directory removed when the test ends.
type Postgres struct {
	t    testing.TB
	bin  string // directory holding initdb, pg_ctl, postgres
	dir  string // temp root: data/, sock/, log
	port int
	as   string   // user the server runs as ("" = the current user)
	set  []string // extra "-c name=value" settings (PostgresSetting)
}

// PostgresOption changes how OwnPostgres starts its server.
type PostgresOption func(*Postgres)

// PostgresSetting starts the server with name=value (postgres -c), e.g.
// fsync=off for a test of a server that does not make commits durable.
func PostgresSetting(name, value string) PostgresOption {
	return func(p *Postgres) { p.set = append(p.set, "-c "+name+"="+value) }
}

// OwnPostgres initialises and starts a private PostgreSQL server for t, using
// Debian's /usr/lib/postgresql/<version>/bin (the highest version installed) or
// the directory in FENCEGATE_TEST_PG_BIN. Postgres refuses to run as root, so
// under root the server runs as the `postgres` user (through runuser) with a
// data directory that user owns. Authentication is trust, on 127.0.0.1 only.
// Without a PostgreSQL installation the test skips, and fails under CI=true.
func OwnPostgres(t testing.TB, opts ...PostgresOption) *Postgres {
	t.Helper()
	bin := postgresBin()
	if bin == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin or FENCEGATE_TEST_PG_BIN): the suite must run in CI")
		}
		t.Skip("no PostgreSQL server binaries; install postgresql or set FENCEGATE_TEST_PG_BIN")
	}
	dir, err := os.MkdirTemp("", "fg-own-pg-")
	if err != nil {
		t.Fatalf("own postgres: %v", err)
	}
	p := &Postgres{t: t, bin: bin, dir: dir}
	for _, o := range opts {
		o(p)
	}
	t.Cleanup(func() {
		_ = p.ctl("stop", "-m", "immediate", "-w", "-t", "30")
		_ = os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		p.as = "postgres"
		u, err := user.Lookup(p.as)
		if err != nil {
			t.Fatalf("own postgres: running as root needs a %q user: %v", p.as, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("own postgres: %v", err)
		}
	}
	if out, err := p.run(filepath.Join(bin, "initdb"), "-D", p.data(), "-U", "postgres",
		"--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"); err != nil {
		t.Fatalf("own postgres: initdb: %v\n%s", err, out)
	}
	if out, err := p.run("mkdir", "-p", filepath.Join(dir, "sock")); err != nil {
		t.Fatalf("own postgres: %v\n%s", err, out)
	}
	// A port picked from the kernel may be taken again before the server
	// binds it; try a few.
	for attempt := 0; ; attempt++ {
		p.port = freePort(t)
		err := p.start()
		if err == nil {
			break
		}
		if attempt == 4 {
			t.Fatalf("own postgres: %v\n%s", err, p.Log())
		}
	}
	return p
}

// postgresBin finds the server binaries: FENCEGATE_TEST_PG_BIN, else the highest
// /usr/lib/postgresql/<version>/bin holding pg_ctl.
func postgresBin() string {
	if b := os.Getenv("FENCEGATE_TEST_PG_BIN"); b != "" {
		return b
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	sort.Slice(found, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(found[j]))))
		return vi < vj
	})
	if len(found) == 0 {
		return ""
	}
	return filepath.Dir(found[len(found)-1])
}

// freePort is FreeAddr's port, for servers told a port rather than an address.
func freePort(t testing.TB) int {
	t.Helper()
	return int(netip.MustParseAddrPort(FreeAddr(t)).Port())
}

func (p *Postgres) data() string { return filepath.Join(p.dir, "data") }

// run runs a command as the server's user and returns its combined output.
func (p *Postgres) run(name string, args ...string) ([]byte, error) {
	if p.as != "" {
		args = append([]string{"-u", p.as, "--", name}, args...)
		name = "runuser"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

func (p *Postgres) ctl(args ...string) error {
	args = append(args, "-D", p.data())
	out, err := p.run(filepath.Join(p.bin, "pg_ctl"), args...)
	if err != nil {
		return fmt.Errorf("pg_ctl %v: %v\n%s", args[0], err, out)
	}
	return nil
}

// start runs pg_ctl start and waits until the server accepts connections.
func (p *Postgres) start() error {
	// fsync stays on: the adapters refuse a server that does not make
	// commits durable (pgconf.CheckDurable). full_page_writes off only
	// risks torn pages on a power loss, which no test makes.
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s "+
		"-c full_page_writes=off -c max_connections=200 -c shared_buffers=32MB",
		p.port, filepath.Join(p.dir, "sock"))
	for _, c := range p.set {
		opts += " " + c
	}
	if err := p.ctl("start", "-w", "-t", "60", "-l", filepath.Join(p.dir, "log"), "-o", opts); err != nil {
		return err
	}
	return p.wait()
}

// wait polls until a connection succeeds (pg_ctl -w already waits; this also
// proves TCP works).
func (p *Postgres) wait() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, p.URL())
		if err == nil {
			return c.Close(ctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("own postgres on port %d does not answer: %w", p.port, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// URL is the connection URL of the server's `postgres` database (no TLS).
func (p *Postgres) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// Addr is the server's host:port.
func (p *Postgres) Addr() string { return fmt.Sprintf("127.0.0.1:%d", p.port) }

// Stop shuts the server down cleanly (fast mode: sessions are disconnected,
// a checkpoint is written) and waits until it is down.
func (p *Postgres) Stop() {
	p.t.Helper()
	if err := p.ctl("stop", "-m", "fast", "-w", "-t", "60"); err != nil {
		p.t.Fatalf("own postgres: %v", err)
	}
}

// Kill stops the server the way a crash does (pg_ctl immediate mode: every
// process quits at once, no checkpoint; the next Start runs crash recovery)
// and waits until it is down.
func (p *Postgres) Kill() {
	p.t.Helper()
	if err := p.ctl("stop", "-m", "immediate", "-w", "-t", "60"); err != nil {
		p.t.Fatalf("own postgres: %v", err)
	}
}

// Start starts a stopped or killed server again on the same port and data
// directory, and waits until it accepts connections.
func (p *Postgres) Start() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatalf("own postgres: %v\n%s", err, p.Log())
	}
}

// Restart stops the server cleanly and starts it again.
func (p *Postgres) Restart() {
	p.t.Helper()
	p.Stop()
	p.Start()
}

// Log returns the server's log so far (for failure messages).
func (p *Postgres) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "log"))
	return string(b)
}
