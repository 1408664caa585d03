package main

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestLatencyProxyDelaysEachWayAndForwards: through withLatency's URL a
// query reaches the server and its answer comes back whole, and a round
// trip takes at least the delay twice (there and back); a delay is a lower
// bound, so the check cannot be upset by a slow machine. Once stopped, the
// proxy takes no new connection.
func TestLatencyProxyDelaysEachWayAndForwards(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const delay = 40 * time.Millisecond
	u, stop, err := withLatency(testenv.PostgresURL(t), int(delay/time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	start := time.Now()
	var got string
	// The simple protocol: one round trip (the default would prepare
	// first, two), so a delay in one direction alone would fall short.
	err = conn.QueryRow(ctx, `SELECT repeat('x', 100000) || 'end'`, pgx.QueryExecModeSimpleProtocol).Scan(&got)
	took := time.Since(start)
	_ = conn.Close(ctx)
	if err != nil || len(got) != 100003 || got[100000:] != "end" {
		stop()
		t.Fatalf("through the proxy: %d bytes, %v; want the 100,003-byte answer", len(got), err)
	}
	if took < 2*delay {
		t.Errorf("a round trip through the proxy took %v, want at least %v (the delay each way)", took, 2*delay)
	}
	stop()
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if c, err := pgx.Connect(short, u); err == nil {
		_ = c.Close(ctx)
		t.Errorf("the stopped proxy still took a connection")
	}
}

// TestLatencyProxyNeedsOneTCPAddress: a unix socket (in the host
// parameter, or by default without a host) or several hosts are refused
// rather than proxied to a guessed address.
func TestLatencyProxyNeedsOneTCPAddress(t *testing.T) {
	t.Setenv("PGHOST", "")
	for _, u := range []string{
		"postgres://postgres@/test?host=/var/run/postgresql",
		"postgres:///test",
		"postgres://postgres@127.0.0.1/test?host=10.0.0.1,10.0.0.2",
		"postgres://postgres@h1,h2/test",
		"postgres://postgres@h1:5432,h2:5433/test",
	} {
		if got, stop, err := withLatency(u, 1); err == nil {
			stop()
			t.Errorf("withLatency(%q) = %q, want an error", u, got)
		}
	}
}

// TestLatencyProxyFollowsThePortParameter: a port given as a parameter
// (which pgx lets override the URL's) is where the proxy forwards, and the
// returned URL reaches the server through the proxy with it removed.
func TestLatencyProxyFollowsThePortParameter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	direct, err := url.Parse(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := direct.Query()
	q.Set("port", direct.Port())
	direct.RawQuery = q.Encode()
	direct.Host = direct.Hostname() + ":1" // overridden by port=
	u, stop, err := withLatency(direct.String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if pu, _ := url.Parse(u); pu.Query().Has("port") {
		t.Fatalf("proxied URL %s keeps port=", u)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	_ = conn.Close(ctx)
}
