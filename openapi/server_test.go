package openapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
	"github.com/fencegate/fencegate/registry"
	regembedded "github.com/fencegate/fencegate/registry/embedded"
)

const (
	tokA     = "token-a"
	tokB     = "token-b"
	ownerB   = "spiffe://test/worker-b"
	tokAdmin = "admin-token"
)

// testEnv is a full router on embedded parts: fence store, local object
// store, lease registry, a prooftest trust setup and a fake operator (admin).
type testEnv struct {
	t     *testing.T
	h     http.Handler
	doc   *openapi3.T
	admin *fakeAdmin
}

// fakeAdmin implements handlers.Admin on the kit's verifier, checking its
// inputs as the real one (internal/app) does: epoch 0 and bad bundles are
// INVALID_REQUEST, rotate and floor without an in-process registry
// UNSUPPORTED, a bundle lacking the registry's key INVALID_REQUEST. Its
// modes are the gateway's own, so SetMode follows the real rules (a bad
// pattern or mode INVALID_REQUEST, shadow without break-glass for a pattern
// not already shadow FORBIDDEN) and takes effect on fenced writes.
type fakeAdmin struct {
	mu       sync.Mutex
	verifier *proofs.Verifier
	regKID   string // the registry's signing key; "" without an in-process registry
	epoch    uint64 // the registry's issuer epoch
	policy   uint64
	revoked  []uint64
	floor    uint64
	modes    *gateway.Modes // shared with the gateway
	panics   bool           // State panics, to exercise the recoverer
}

var _ handlers.Admin = (*fakeAdmin)(nil)

func (a *fakeAdmin) state() handlers.AdminState {
	b := a.verifier.Bundle()
	st := handlers.AdminState{PolicyGeneration: a.policy, RevokedEpochs: append([]uint64{}, a.revoked...),
		TrustBundleVersion: b.Version(), KeyIDs: b.KeyIDs(), Modes: []gateway.ModeRule{}}
	if a.modes != nil {
		st.Modes = append(st.Modes, a.modes.Rules()...)
	}
	if a.regKID != "" {
		st.IssuerEpoch = a.epoch
	}
	return st
}

func (a *fakeAdmin) State(context.Context) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.panics {
		panic("fake admin: state is broken")
	}
	return a.state(), nil
}

func (a *fakeAdmin) RetireEpoch(_ context.Context, epoch uint64) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if epoch == 0 {
		return handlers.AdminState{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "epoch 0 does not exist")
	}
	if a.regKID != "" && epoch == a.epoch {
		if err := a.rotateLocked(); err != nil {
			return handlers.AdminState{}, err
		}
	}
	if !slices.Contains(a.revoked, epoch) {
		a.revoked = append(a.revoked, epoch)
		slices.Sort(a.revoked)
	}
	return a.state(), nil
}

func (a *fakeAdmin) RotateKey(context.Context) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.rotateLocked(); err != nil {
		return handlers.AdminState{}, err
	}
	return a.state(), nil
}

// rotateLocked publishes a bundle (version + 1) with a new key for the next
// epoch, keeping the earlier keys.
func (a *fakeAdmin) rotateLocked() error {
	if a.regKID == "" {
		return fencegate.Errorf(fencegate.CodeUnsupported, "no in-process registry")
	}
	kid := "registry-" + strconv.FormatUint(a.epoch+1, 10)
	signer, err := proofs.GenerateEd25519Signer(kid)
	if err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "generate key")
	}
	old := a.verifier.Bundle()
	nb, err := proofs.NewBundle(old.Version()+1, append(old.Keys(), signer.BundleKey(a.epoch+1))...)
	if err != nil {
		return err
	}
	if err := a.verifier.SetBundle(nb); err != nil {
		return err
	}
	a.epoch++
	a.regKID = kid
	return nil
}

func (a *fakeAdmin) SetFloor(_ context.Context, floor uint64) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.regKID == "" {
		return handlers.AdminState{}, fencegate.Errorf(fencegate.CodeUnsupported, "no in-process registry")
	}
	a.floor = max(a.floor, floor)
	return a.state(), nil
}

func (a *fakeAdmin) BumpPolicy(context.Context) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.policy++
	return a.state(), nil
}

func (a *fakeAdmin) SetMode(_ context.Context, rule gateway.ModeRule, breakGlass bool) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.modes == nil {
		return handlers.AdminState{}, fencegate.Errorf(fencegate.CodeUnsupported, "no gateway modes")
	}
	if err := a.modes.Set(rule.Pattern, rule.Mode, breakGlass); err != nil {
		return handlers.AdminState{}, err
	}
	return a.state(), nil
}

func (a *fakeAdmin) TrustBundle(context.Context) ([]byte, error) {
	return a.verifier.Bundle().Marshal()
}

// SignedTrustBundle serves the bundle unsigned, as a registry that does
// not sign.
func (a *fakeAdmin) SignedTrustBundle(ctx context.Context) ([]byte, string, error) {
	b, err := a.TrustBundle(ctx)
	return b, "", err
}

// TrustBundleChain keeps no chain, as a registry that does not sign.
func (a *fakeAdmin) TrustBundleChain(context.Context, uint64) (fencegate.BundleChain, error) {
	return fencegate.BundleChain{}, fencegate.Errorf(fencegate.CodeNotFound, "this registry keeps no trust bundle chain")
}

func (a *fakeAdmin) SetTrustBundle(_ context.Context, data []byte) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, err := proofs.ParseBundle(data)
	if err != nil {
		return handlers.AdminState{}, err
	}
	if a.regKID != "" {
		if _, ok := b.Key(a.regKID); !ok {
			return handlers.AdminState{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "the bundle lacks the registry's signing key %q", a.regKID)
		}
	}
	if err := a.verifier.SetBundle(b); err != nil {
		return handlers.AdminState{}, err
	}
	return a.state(), nil
}

// newEnv builds the router; mods change the server and the fake admin
// before the router is built.
func newEnv(t *testing.T, mods ...func(*handlers.Server, *fakeAdmin)) *testEnv {
	t.Helper()
	kit := prooftest.New(t)
	dir := t.TempDir()
	st, err := embedded.Open(filepath.Join(dir, "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	loc, err := local.New("local", filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatal(err)
	}
	backend, err := regembedded.Open(filepath.Join(dir, "registry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	reg, err := registry.New(registry.Config{
		Backend: backend, Signer: kit.Signer(), Now: kit.Now,
		IssuerEpoch: kit.Epoch(), PolicyGeneration: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	modes, err := gateway.NewModes()
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{
		Verifier: kit.Verifier(), Store: st, Now: kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Modes: modes,
	})
	if err != nil {
		t.Fatal(err)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.Header.Get("Authorization") == "Bearer upstream-secret" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"payout":"po_1"}`))
			return
		}
		if r.Header.Get("Idempotency-Key") == "" || r.Header.Get("Authorization") != "Bearer upstream-secret" {
			http.Error(w, "bad call", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"payout":"po_1"}`))
	}))
	t.Cleanup(upstream.Close)
	t.Setenv("OPENAPI_TEST_UPSTREAM_TOKEN", "upstream-secret")
	payouts, err := httpapi.New(httpapi.APIConfig{
		Name: "payouts", BaseURL: upstream.URL,
		Credentials: &httpapi.Credentials{Header: "Authorization", Prefix: "Bearer ", Env: "OPENAPI_TEST_UPSTREAM_TOKEN"},
		Contract: httpapi.Contract{Idempotency: &httpapi.Idempotency{
			KeyRetention: 24 * time.Hour,
		}},
		Routes: []httpapi.Route{{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"},
			{Method: "GET", Path: "/v1/payouts/{payout}", Resource: "payouts/reads"}},
	}, upstream.Client())
	if err != nil {
		t.Fatal(err)
	}
	adm := &fakeAdmin{verifier: kit.Verifier(), regKID: kit.Signer().KeyID(), epoch: kit.Epoch(), policy: 1, modes: modes}
	srv := &handlers.Server{
		APIs:      map[string]*httpapi.API{"payouts": payouts},
		Gateway:   gw,
		Stores:    map[string]fencegate.ObjectStore{"local": loc},
		Auth:      handlers.NewBearerTokens(map[string]string{tokA: prooftest.DefaultOwner, tokB: ownerB}),
		AdminAuth: handlers.NewBearerTokens(map[string]string{tokAdmin: "ops"}),
		Admin:     adm,
		Registry:  reg,
		Bindings:  &gateway.Bindings{Store: st, Leases: reg, Log: slog.Default()},
		SpoolDir:  t.TempDir(),
		MaxBody:   1 << 20,
	}
	for _, mod := range mods {
		mod(srv, adm)
	}
	return &testEnv{t: t, h: handlers.Router(srv), doc: loadDoc(t), admin: adm}
}

// find resolves a request path to a spec operation. Trailing key, path and
// resource parameters may span slashes; others match one segment.
func (e *testEnv) find(method, path string) (*routers.Route, map[string]string) {
	e.t.Helper()
	for tmpl, item := range e.doc.Paths.Map() {
		op := item.GetOperation(method)
		if op == nil {
			continue
		}
		var names []string
		segs := strings.Split(tmpl, "/")
		for i, seg := range segs {
			name, ok := strings.CutPrefix(seg, "{")
			if !ok {
				segs[i] = regexp.QuoteMeta(seg)
				continue
			}
			name = strings.TrimSuffix(name, "}")
			names = append(names, name)
			segs[i] = "([^/]+)"
			if i == len(segs)-1 && slices.Contains([]string{"key", "path", "resource"}, name) {
				segs[i] = "(.+)"
			}
		}
		expr := "^" + strings.Join(segs, "/") + "$"
		m := regexp.MustCompile(expr).FindStringSubmatch(path)
		if m == nil {
			continue
		}
		params := map[string]string{}
		for i, name := range names {
			params[name] = m[i+1]
		}
		return &routers.Route{Spec: e.doc, Path: tmpl, PathItem: item, Method: method, Operation: op}, params
	}
	e.t.Fatalf("no spec operation for %s %s", method, path)
	return nil, nil
}

// call sends a request to the router, checks the status, validates the
// response (and, for 2xx, the request) against the spec, and returns the
// decoded JSON body.
func (e *testEnv) call(method, path, token string, hdr map[string]string, body string, want int) (http.Header, map[string]any) {
	e.t.Helper()
	req := httptest.NewRequest(method, "http://gw"+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	if rec.Code != want {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, rec.Code, want, rec.Body.String())
	}
	route, params := e.find(method, req.URL.Path)
	ctx := context.Background()
	opts := &openapi3filter.Options{IncludeResponseStatus: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}
	rin := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if want < 300 {
		vreq := httptest.NewRequest(method, "http://gw"+path, strings.NewReader(body))
		vreq.Header = req.Header.Clone()
		vin := *rin
		vin.Request = vreq
		if err := openapi3filter.ValidateRequest(ctx, &vin); err != nil {
			e.t.Errorf("%s %s: request does not match the spec: %v", method, path, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: rin, Status: rec.Code, Header: rec.Header(), Options: opts,
	}
	out.SetBodyBytes(rec.Body.Bytes())
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		e.t.Errorf("%s %s: %d response does not match the spec: %v", method, path, rec.Code, err)
	}
	if missing := undeclaredFenceHeaders(route, rec.Code, rec.Header()); len(missing) > 0 {
		e.t.Errorf("%s %s: %d response carries headers its spec response does not declare: %v", method, path, rec.Code, missing)
	}
	var m map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return rec.Header(), m
}

// undeclaredFenceHeaders lists the Fence-* headers of an answer that the
// spec response it matches (by status, else default) does not declare. The
// response validator ignores undeclared headers, so every answer call checks
// this rule itself: each Fence-* header a client may read is in the spec.
func undeclaredFenceHeaders(route *routers.Route, status int, h http.Header) []string {
	resp := route.Operation.Responses.Status(status)
	if resp == nil {
		resp = route.Operation.Responses.Default()
	}
	var missing []string
	for name := range h {
		if !strings.HasPrefix(name, "Fence-") {
			continue
		}
		if resp == nil || resp.Value == nil || resp.Value.Headers[name] == nil {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	return missing
}

func fenced(grant, status string, seg int) map[string]string {
	return map[string]string{"Fence-Grant": grant, "Fence-Status": status, "Fence-Segment": strconv.Itoa(seg)}
}

func wantCode(t *testing.T, body map[string]any, code fencegate.Code) {
	t.Helper()
	if got, _ := body["code"].(string); got != string(code) {
		t.Errorf("code %q, want %s", got, code)
	}
}

func jsonMarshal(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
