package app

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
)

// noChain is a proxy to the registry at target that answers its chain
// route (/v1/trust-bundle/chain) 404, as a registry older than it does.
func noChain(t *testing.T, target string) string {
	return registryProxy(t, target, func(rw http.ResponseWriter, r *http.Request) bool {
		if strings.HasPrefix(r.URL.Path, "/v1/trust-bundle/chain") {
			http.NotFound(rw, r)
			return true
		}
		return false
	}, nil)
}

// registryProxy is a proxy to the registry at target, for the tests of
// what a replica makes of its answers: answer, if set, answers a request
// itself when it reports true, and modify, if set, edits the registry's
// answers (httputil.ReverseProxy.ModifyResponse).
func registryProxy(t *testing.T, target string, answer func(http.ResponseWriter, *http.Request) bool, modify func(*http.Response) error) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = modify
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if answer != nil && answer(rw, r) {
			return
		}
		proxy.ServeHTTP(rw, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// openAccess lets every identity write anywhere, as config.Dev does, so
// that a precheck is about grants and epochs only.
func openAccess(c *config.Config) { c.Access = config.Dev().Access }

// precheck asks rep's acceptance point about a write under a lease answer
// (grant and status proof) and returns its refusal code ("" if admitted).
func precheck(t *testing.T, rep *App, a fencegate.LeaseAnswer) fencegate.Code {
	t.Helper()
	err := rep.Gateway.Precheck(context.Background(), gateway.Request{Caller: a.Owner, GrantToken: a.Grant, StatusToken: a.StatusProof,
		Segment: 1, Resource: a.Resource, Target: a.Resource, Method: "PUT"})
	if err == nil {
		return ""
	}
	return fencegate.ErrorCode(err)
}

// Rule: a replica that missed two changes at its registry (K1→K2, then
// epoch 1 revoked: v3 = {K2}, signed by K2 only) and cannot follow to v3
// still refuses K1 at once: after one pull a grant and status proof under
// K1 are EPOCH_REVOKED there, and a grant under K2 stays GRANT_INVALID
// (nothing of v3 is trusted); the refusal is logged once as an error
// naming the operator's step.
func TestAReplicaThatMissedARevocationRefusesTheRevokedEpochAtOnce(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	// A registry older than the chain route: the narrowing alone is under test.
	rep, logs := chainReplica(t, w, noChain(t, w.srv.URL), openAccess)
	underK1 := w.acquire("token-a", "local/reports/40", "r-1")
	if code := precheck(t, rep, underK1); code != "" {
		t.Fatalf("before any change, a grant under K1: %s", code)
	}
	if _, err := w.app.auth.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.app.auth.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	underK2 := w.acquire("token-b", "local/reports/41", "r-2")
	rep.pull(ctx, 0)
	rep.pull(ctx, 0)
	if v := rep.auth.Verifier().Bundle().Version(); v != 1 {
		t.Fatalf("the replica installed version %d with no key in common", v)
	}
	if code := precheck(t, rep, underK1); code != fencegate.CodeEpochRevoked {
		t.Fatalf("a grant and status under K1 after the pull: %q, want EPOCH_REVOKED\n%s", code, logs.String())
	}
	if code := precheck(t, rep, underK2); code != fencegate.CodeGrantInvalid {
		t.Fatalf("a grant under K2: %q, want GRANT_INVALID", code)
	}
	if n := strings.Count(logs.String(), "its revocations applied here"); n != 1 {
		t.Fatalf("the narrowing was logged %d times, want once:\n%s", n, logs.String())
	}
}

// Rule: a replica that cannot follow its registry's bundle backs off: the
// same refused bundle is offered again (and the registry's chain fetched
// again) only after a wait, 1 s doubling to a minute, not at every pull,
// so stuck replicas do not keep the registry reading its chain every
// second; a new bundle at the registry is offered at once.
func TestAReplicaBacksOffFromABundleItRefused(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	var chains atomic.Int32
	target, err := url.Parse(w.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/trust-bundle/chain") {
			chains.Add(1)
			http.NotFound(rw, r)
			return
		}
		proxy.ServeHTTP(rw, r)
	}))
	t.Cleanup(srv.Close)
	rep, _ := chainReplica(t, w, srv.URL, openAccess)
	if _, err := w.app.auth.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.app.auth.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		rep.pull(ctx, 0)
	}
	if n := chains.Load(); n != 1 {
		t.Fatalf("three pulls of the same refused bundle fetched the chain %d times; want once, then a wait", n)
	}
	if _, err := w.app.auth.RotateKey(ctx); err != nil { // a new bundle at the registry
		t.Fatal(err)
	}
	rep.pull(ctx, 0)
	if n := chains.Load(); n != 2 {
		t.Fatalf("a new bundle at the registry: the chain fetched %d times in all; want it offered at once (2)", n)
	}
}

// Rule: the backoff from a refused bundle (INVALID_REQUEST) waits 1 s,
// doubling for the same bundle up to a minute; from one whose chain could
// not be fetched (BACKEND_UNAVAILABLE from FollowBundle) 1 s doubling only
// up to 5 s, so a chain route back up is used within 5 s (it used to share
// the minute, and a replica that could not verify its registry's new key
// refused writes for up to a minute after the registry recovered). Each
// cause doubles on its own for the bundle: a change of cause goes on from
// that cause's last wait (a chain route flapping used to reset the wait to
// 1 s at each change, so a refusal was fetched, counted and logged about
// every 2 s); another bundle starts again at 1 s, for either cause; anything else (an install, or INTERNAL: revocations that
// could not be applied here are tried again at the next pull) ends it.
func TestTheBackoffFromARefusedBundleDoublesToAMinuteAndFromAnUnfetchedChainToFiveSeconds(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	refused := fencegate.Errorf(fencegate.CodeInvalidRequest, "refused")
	noChain := fencegate.Errorf(fencegate.CodeBackendUnavailable, "the registry's chain could not be fetched")
	a, b := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))
	for name, c := range map[string]struct {
		errs  []error
		waits []time.Duration
	}{
		"refused":             {[]error{refused}, []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}},
		"chain not fetched":   {[]error{noChain}, []time.Duration{1, 2, 4, 5, 5, 5}},
		"one, then the other": {[]error{refused, noChain}, []time.Duration{1, 1, 2, 2, 4, 4, 8, 5, 16, 5, 32, 5, 60, 5}},
		"a refusal after unfetched waits": {[]error{noChain, noChain, noChain, noChain, refused, refused},
			[]time.Duration{1, 2, 4, 5, 1, 2}},
	} {
		var r refusedFetch
		for i, want := range c.waits {
			r = r.after(a, c.errs[i%len(c.errs)], t0)
			if r.until.Sub(t0) != want*time.Second {
				t.Fatalf("%s: offer %d of the same bundle: wait %s, want %s", name, i+1, r.until.Sub(t0), want*time.Second)
			}
		}
		if r = r.after(b, c.errs[0], t0); r.until.Sub(t0) != time.Second {
			t.Fatalf("%s: another bundle: wait %s, want 1s", name, r.until.Sub(t0))
		}
		// The other cause for the new bundle starts at 1 s too: its wait
		// for the last bundle is not carried over.
		other := noChain
		if c.errs[0] == noChain {
			other = refused
		}
		if r = r.after(b, other, t0); r.until.Sub(t0) != time.Second {
			t.Fatalf("%s: another bundle, then the other cause: wait %s, want 1s", name, r.until.Sub(t0))
		}
		for _, err := range []error{nil, fencegate.Errorf(fencegate.CodeInternal, "state file")} {
			if got := r.after(b, err, t0); got != (refusedFetch{}) {
				t.Fatalf("%s: after %v: %+v, want no backoff", name, err, got)
			}
		}
	}
}
