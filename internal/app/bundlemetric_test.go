package app

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// bundleRefusals scrapes the replica's /metrics (its operator handler) for
// fencegate_trust_bundle_refusals_total by source; a source not exposed is
// absent from the map.
func bundleRefusals(t *testing.T, a *App) map[string]float64 {
	t.Helper()
	code, body := get(t, a.operatorHandler(), "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("/metrics answered %d", code)
	}
	out := map[string]float64{}
	for _, m := range regexp.MustCompile(`(?m)^fencegate_trust_bundle_refusals_total\{source="([a-z]+)"\} (\S+)$`).FindAllStringSubmatch(body, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		out[m[1]] = v
	}
	return out
}

func wantBundleRefusals(t *testing.T, a *App, when string, registry, file float64) {
	t.Helper()
	got := bundleRefusals(t, a)
	if len(got) != 2 || got["registry"] != registry || got["file"] != file {
		t.Fatalf("%s: fencegate_trust_bundle_refusals_total %v; want registry %v, file %v", when, got, registry, file)
	}
}

// Rule: fencegate_trust_bundle_refusals_total{source} counts each offer of
// a trust bundle a replica refuses, once: source registry for a fetched one
// (an impostor's), not again while the same bundle waits out its backoff
// (fetched, not offered), at once for another; source file for each reload
// that refuses the bundle file. A bundle taken (a rotation through the
// registry) or not newer (the file unchanged) moves neither; both series
// are exposed at 0 from the start.
func TestARefusedTrustBundleIsCountedOncePerOfferAndATakenOneIsNot(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()

	good, _ := chainReplica(t, w, w.srv.URL, nil)
	wantBundleRefusals(t, good, "at start", 0, 0)
	if _, err := w.app.auth.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	good.pull(ctx, 0)
	good.reloadBundle()
	if v := good.auth.Verifier().Bundle().Version(); v != 2 {
		t.Fatalf("the rotation through the registry: version %d, want 2", v)
	}
	wantBundleRefusals(t, good, "after a rotation taken and a reload of the file it wrote", 0, 0)

	kid := w.app.auth.Signer().KeyID()
	var mu sync.Mutex
	doc, sig, _ := prooftest.Impostor(t, kid, 2, 9, proofs.Revocations{})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		rw.Header().Set(fencegate.BundleSignatureHeader, sig)
		_, _ = rw.Write(doc)
	}))
	defer srv.Close()
	rep, _ := chainReplica(t, w, srv.URL, nil)
	rep.pull(ctx, 0)
	rep.pull(ctx, 0) // the same bundle, backing off: fetched, not offered
	wantBundleRefusals(t, rep, "after the impostor's bundle, fetched twice", 1, 0)
	mu.Lock()
	doc, sig, _ = prooftest.Impostor(t, kid, 2, 10, proofs.Revocations{})
	mu.Unlock()
	rep.pull(ctx, 0)
	wantBundleRefusals(t, rep, "after another bundle of the impostor's", 2, 0)
	if v := rep.auth.Verifier().Bundle().Version(); v != 2 {
		t.Fatalf("the impostor's bundles changed the replica's: version %d, want 2", v)
	}

	// The bundle file: unchanged, then replaced by one that does not parse.
	rep.reloadBundle()
	wantBundleRefusals(t, rep, "after a reload of the file unchanged", 2, 0)
	if err := os.WriteFile(rep.cfg.TrustBundle, []byte(`{"version":`), 0o644); err != nil {
		t.Fatal(err)
	}
	rep.reloadBundle()
	rep.reloadBundle()
	wantBundleRefusals(t, rep, "after two reloads of a broken file", 2, 2)
	if v := rep.auth.Verifier().Bundle().Version(); v != 2 {
		t.Fatalf("the broken file changed the replica's bundle: version %d, want 2", v)
	}
}

// Rule: a refused bundle file is logged once for each version and reason,
// not at every reload: a file that does not load (no version) is logged
// too, another reason is logged again, and so is the same refusal after a
// reload that refused nothing.
func TestARefusedBundleFileIsLoggedOncePerVersionAndReason(t *testing.T) {
	w := newS3World(t)
	rep, _ := chainReplica(t, w, w.srv.URL, nil)
	var buf bytes.Buffer
	rep.log = slog.New(slog.NewTextHandler(&buf, nil))
	good, err := os.ReadFile(rep.cfg.TrustBundle)
	if err != nil {
		t.Fatal(err)
	}
	logged := func() int { return strings.Count(buf.String(), "trust bundle file refused") }
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(rep.cfg.TrustBundle, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		file []byte
		want int
	}{
		{[]byte(`{"version":`), 1}, // does not load: logged, with no version
		{[]byte(`{"version":`), 1}, // the same refusal: not again
		{[]byte(`not json`), 2},    // another reason: logged
		{good, 2},                  // refuses nothing
		{[]byte(`not json`), 3},    // the same refusal after it: logged again
	}
	for i, s := range steps {
		write(s.file)
		rep.reloadBundle()
		if got := logged(); got != s.want {
			t.Fatalf("step %d: %d refusals logged, want %d; log:\n%s", i, got, s.want, buf.String())
		}
	}
}

// Rule: a chain walk that fails only because GET /v1/trust-bundle/chain
// could not be fetched (here a proxy's 503 without a Fencegate problem) is
// an unreachable registry, not a refusal: nothing is counted and it is
// logged as a chain not fetched; the fetched bundle's revocations apply at
// the replica all the same (its bundle stays), so the outage keeps no
// revoked epoch trusted. The same bundle is then not offered again (nor
// the chain fetched) until its backoff has passed (1 s, doubling to 5 s),
// as after a refusal; a bundle that could not be fetched starts no backoff,
// and one that could not be fetched while a backoff runs leaves it exactly
// as it was (neither ended nor extended). Once the
// wait has passed, the next pull finds the chain's step signed by that
// epoch's key refused, counted, for an operator.
func TestAChainThatCannotBeFetchedIsNotCountedButItsRevocationsApply(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	var down, bundleDown atomic.Bool
	var chains atomic.Int32
	down.Store(true)
	proxied := registryProxy(t, w.srv.URL, func(rw http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/v1/trust-bundle/chain" {
			chains.Add(1)
		}
		if down.Load() && r.URL.Path == "/v1/trust-bundle/chain" || bundleDown.Load() && r.URL.Path == "/v1/trust-bundle" {
			http.Error(rw, "upstream unavailable", http.StatusServiceUnavailable)
			return true
		}
		return false
	}, nil)
	rep, logs := chainReplica(t, w, proxied, nil) // at v1
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rep.pullClock = func() time.Time { return now }
	bundleDown.Store(true)
	rep.pull(ctx, 0)
	if rep.refused != (refusedFetch{}) {
		t.Fatalf("a bundle that could not be fetched started a backoff: %+v", rep.refused)
	}
	bundleDown.Store(false)
	if _, err := w.app.auth.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.app.auth.RetireEpoch(ctx, 1); err != nil { // v3 = {K2}, signed by K2 only: off the chain at v1
		t.Fatal(err)
	}
	rep.pull(ctx, 0)
	wantBundleRefusals(t, rep, "after a pull whose chain answered 503", 0, 0)
	if v := rep.auth.Verifier().Bundle().Version(); v != 1 || !rep.auth.EpochRevoked(1) {
		t.Fatalf("the chain not fetched: version %d, epoch 1 revoked %v; want 1, revoked here", v, rep.auth.EpochRevoked(1))
	}
	if !strings.Contains(logs.String(), "could not be fetched") {
		t.Fatalf("the unreachable chain is not logged as such:\n%s", logs.String())
	}
	running := rep.refused
	bundleDown.Store(true)
	rep.pull(ctx, 0)
	bundleDown.Store(false)
	if rep.refused != running || running.unfetchedWait != time.Second {
		t.Fatalf("a bundle fetch that failed within a backoff (%+v) left it as %+v", running, rep.refused)
	}
	down.Store(false)
	for range 2 {
		now = now.Add(499 * time.Millisecond) // within the backoff of 1 s
		rep.pull(ctx, 0)
	}
	if n := chains.Load(); n != 1 {
		t.Fatalf("pulls of the same bundle within its backoff fetched the chain %d times in all; want once", n)
	}
	wantBundleRefusals(t, rep, "pulls within the backoff", 0, 0)
	now = now.Add(2 * time.Millisecond)
	rep.pull(ctx, 0)
	if n := chains.Load(); n != 2 {
		t.Fatalf("once the backoff has passed the chain was fetched %d times in all; want 2", n)
	}
	if v := rep.auth.Verifier().Bundle().Version(); v != 1 || !rep.auth.EpochRevoked(1) {
		t.Fatalf("once the chain answers: version %d, epoch 1 revoked %v; want 1, still revoked\n%s", v, rep.auth.EpochRevoked(1), logs.String())
	}
	wantBundleRefusals(t, rep, "after the chain's step under the revoked epoch was refused", 1, 0)
}
