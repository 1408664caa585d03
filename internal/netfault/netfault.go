// Package netfault puts TCP proxies with injected faults between a client
// and a server on loopback: delay, connection resets, a severed link. It
// adapts Shopify's toxiproxy, used as a library in the calling process (no
// toxiproxy server to run), and is the one place the chaos tests and
// loadbench take their faulty links from.
//
// A Link forwards every connection to its upstream until a fault is added;
// faults apply to the link's connections present and future, and Heal
// removes them all. Nothing here is for production traffic.
package netfault

import (
	"context"
	"fmt"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/fencegate/fencegate/internal/loopback"
)

// Proxies is what a test's or run's links are opened from (toxiproxy's
// server, which no one else sees). It does not track them: each caller
// closes its own links.
type Proxies struct {
	srv *toxiproxy.ApiServer
}

// New returns an empty set of proxies.
func New() *Proxies {
	return &Proxies{srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())}
}

// Link is one proxied TCP route: a listen address on loopback forwarding
// to an upstream address.
type Link struct {
	name string
	p    *toxiproxy.Proxy

	mu     sync.Mutex
	cut    bool // severed: Heal reopens it
	closed bool // closed: for good, Heal leaves it so
}

// Open starts a link from a free loopback port to upstream (host:port).
// Close stops it. The port comes from package loopback, outside the
// kernel's ephemeral range: a severed link is reopened on it by Heal, and a
// port the kernel hands out could meanwhile have gone to an outgoing
// connection.
func (ps *Proxies) Open(name, upstream string) (*Link, error) {
	addr, err := loopback.FreeAddr()
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", name, err)
	}
	p := toxiproxy.NewProxy(ps.srv, name, addr, upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("proxy %s: %w", name, err)
	}
	return &Link{name: name, p: p}, nil
}

// Addr is where clients of the link connect (host:port).
func (l *Link) Addr() string { return l.p.Listen }

// Close stops the link for good and closes its connections.
func (l *Link) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.p.Stop()
}

// add installs a toxic, in toxiproxy's JSON form.
func (l *Link) add(name, typ, stream, attrs string) error {
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := l.p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		return fmt.Errorf("link %s: toxic %s: %w", l.name, name, err)
	}
	return nil
}

// Latency holds the data in each direction ms ± jitter milliseconds. Each
// chunk is held from when it arrived, so chunks in flight overlap as on a
// real link: a round trip costs twice ms more, a stream no more than that.
func (l *Link) Latency(ms, jitter int) error {
	attrs := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, ms, jitter)
	if err := l.add("latency_up", "latency", "upstream", attrs); err != nil {
		return err
	}
	return l.add("latency_down", "latency", "downstream", attrs)
}

// ResetPeers makes every connection that sends data reset (TCP RST, after
// timeoutMs) until Heal: requests in flight lose their answers, new
// connections die at their first write.
func (l *Link) ResetPeers(timeoutMs int) error {
	return l.add("reset_up", "reset_peer", "upstream", fmt.Sprintf(`{"timeout":%d}`, timeoutMs))
}

// Sever closes every connection of the link and refuses new ones until
// Heal.
func (l *Link) Sever() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.p.Stop()
	l.cut = true
}

// Heal removes every fault and reopens a severed link on its address; a
// closed link stays closed.
func (l *Link) Heal() error {
	l.p.Toxics.ResetToxics(context.Background())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut && !l.closed {
		if err := l.p.Start(); err != nil {
			return fmt.Errorf("link %s: reopen: %w", l.name, err)
		}
		l.cut = false
	}
	return nil
}
