package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// links are the TCP proxies (toxiproxy, as a library in the test process)
// between each replica and the stores it uses: one per replica and store, so
// a fault can hit one replica's link alone.
type links struct {
	srv *toxiproxy.ApiServer
}

func newLinks() *links {
	return &links{srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())}
}

// link is one proxied TCP route: a listen address on loopback forwarding to
// upstream, with the faults the nemesis injects on it.
type link struct {
	name string
	p    *toxiproxy.Proxy

	mu  sync.Mutex
	cut bool
}

// open starts a proxy from a random loopback port to upstream; it is stopped
// when the test ends.
func (ls *links) open(t *testing.T, name, upstream string) *link {
	t.Helper()
	p := toxiproxy.NewProxy(ls.srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("proxy %s: %v", name, err)
	}
	t.Cleanup(p.Stop)
	return &link{name: name, p: p}
}

// addr is where clients of the link connect.
func (l *link) addr() string { return l.p.Listen }

// add installs a toxic (toxiproxy's JSON form) on the link's connections,
// present and future.
func (l *link) add(name, typ, stream string, attrs string) error {
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := l.p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		return fmt.Errorf("link %s: toxic %s: %w", l.name, name, err)
	}
	return nil
}

// latency delays the data both ways by ms ± jitter milliseconds.
func (l *link) latency(ms, jitter int) error {
	attrs := fmt.Sprintf(`{"latency":%d,"jitter":%d}`, ms, jitter)
	if err := l.add("latency_up", "latency", "upstream", attrs); err != nil {
		return err
	}
	return l.add("latency_down", "latency", "downstream", attrs)
}

// resetPeers makes every connection that sends data reset (TCP RST, after
// timeoutMs) until heal: requests in flight lose their answers, new
// connections die at their first write.
func (l *link) resetPeers(timeoutMs int) error {
	return l.add("reset_up", "reset_peer", "upstream", fmt.Sprintf(`{"timeout":%d}`, timeoutMs))
}

// sever closes every connection of the link and refuses new ones until heal.
func (l *link) sever() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.p.Stop()
	l.cut = true
}

// heal removes every toxic and reopens a severed link on its address.
func (l *link) heal() error {
	l.p.Toxics.ResetToxics(context.Background())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		if err := l.p.Start(); err != nil {
			return fmt.Errorf("link %s: reopen: %w", l.name, err)
		}
		l.cut = false
	}
	return nil
}
