package main

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate/internal/netfault"
)

// Postgres at a distance (-pg-latency). On this machine the server shares
// the gateway's cores and answers across loopback, so nothing here shows
// how a setting behaves against a server a network away, the usual
// deployment. withLatency puts a TCP proxy in front of the server (package
// netfault, as the chaos tests use it) that holds every chunk of data for
// the delay in each direction, chunks in flight overlapping as on a real
// link, so a round trip costs twice the delay more. Every Postgres client
// of the run goes through it: the gateway, pgbench (the baseline sees the
// same distance) and loadbench's own probes. The proxy runs in loadbench's
// process and takes some of the machine's CPU: compare runs with and
// without it side by side, not with a server that really is remote.

// withLatency starts the proxy in front of the server of pgURL, delaying
// data by ms milliseconds each way, and returns pgURL pointed at it and a
// function that stops it. The server's address is resolved as pgx resolves
// it (the URL's host and port, host= and port= parameters, PGHOST and
// PGPORT, the defaults); one TCP address is needed, so a unix socket or
// several hosts are refused, and the returned URL names the proxy alone.
func withLatency(pgURL string, ms int) (string, func(), error) {
	u, err := url.Parse(pgURL)
	if err != nil {
		return "", nil, fmt.Errorf("Postgres URL: %w", err)
	}
	cfg, err := pgconn.ParseConfig(pgURL)
	if err != nil {
		return "", nil, fmt.Errorf("Postgres URL: %w", err)
	}
	for _, fb := range cfg.Fallbacks { // sslmode=prefer falls back on the same address
		if fb.Host != cfg.Host || fb.Port != cfg.Port {
			return "", nil, fmt.Errorf("-pg-latency needs one Postgres server; %q names several", u.Redacted())
		}
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return "", nil, fmt.Errorf("-pg-latency needs the Postgres server's TCP address; %q is a unix socket", u.Redacted())
	}
	upstream := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	l, err := netfault.New().Open("postgres", upstream)
	if err != nil {
		return "", nil, fmt.Errorf("latency proxy: %w", err)
	}
	if err := l.Latency(ms, 0); err != nil {
		l.Close()
		return "", nil, fmt.Errorf("latency proxy: %w", err)
	}
	q := u.Query()
	q.Del("host")
	q.Del("hostaddr")
	q.Del("port")
	u.RawQuery = q.Encode()
	u.Host = l.Addr()
	return u.String(), l.Close, nil
}
