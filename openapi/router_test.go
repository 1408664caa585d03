package openapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/go-chi/chi/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/openapi"
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

// wildcards maps the prefix of a chi catch-all route ("prefix*") to the name
// of the spec's trailing path parameter that stands for it.
var wildcards = map[string]string{
	"/v1/objects/{store}/": "key",
	"/v1/resources/":       "resource",
	"/v1/apis/{api}/":      "path",
}

func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi.Load()
	if err != nil {
		t.Fatalf("load spec: %v", err)
	}
	return doc
}

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

func (a *fakeAdmin) RevokeEpoch(_ context.Context, epoch uint64) (handlers.AdminState, error) {
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
			EffectQuery:  &httpapi.EffectQuery{Method: "GET", URL: "/v1/payouts?key={key}"},
		}},
		Routes: []httpapi.Route{{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"}},
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
		SpoolDir:  t.TempDir(),
		MaxBody:   1 << 20,
	}
	for _, mod := range mods {
		mod(srv, adm)
	}
	return &testEnv{t: t, h: handlers.Router(srv), doc: loadDoc(t), admin: adm}
}

// routedOperations walks the chi router and returns "METHOD /spec/path" for
// every route, with a trailing catch-all mapped to its spec parameter.
func routedOperations(t *testing.T, h http.Handler) []string {
	t.Helper()
	routes, ok := h.(chi.Routes)
	if !ok {
		t.Fatalf("handlers.Router returned %T, not a chi router", h)
	}
	var ops []string
	err := chi.Walk(routes, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if prefix, ok := strings.CutSuffix(route, "*"); ok {
			name, known := wildcards[prefix]
			if !known {
				t.Errorf("catch-all route %s %s has no spec parameter in wildcards", method, route)
				return nil
			}
			route = prefix + "{" + name + "}"
		}
		ops = append(ops, method+" "+route)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(ops)
	return ops
}

// specOperations returns "METHOD /path" for every operation of doc.
func specOperations(doc *openapi3.T) []string {
	var ops []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(ops)
	return ops
}

func TestSpecValidates(t *testing.T) {
	doc := loadDoc(t)
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi version %q, want 3.1.0", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("spec does not validate: %v", err)
	}
}

func TestEveryRouteIsInTheSpec(t *testing.T) {
	e := newEnv(t)
	spec := specOperations(e.doc)
	for _, op := range routedOperations(t, e.h) {
		if !slices.Contains(spec, op) {
			t.Errorf("routed but not in openapi.yaml: %s", op)
		}
	}
}

func TestEverySpecOperationIsRouted(t *testing.T) {
	e := newEnv(t)
	routed := routedOperations(t, e.h)
	for _, op := range specOperations(e.doc) {
		if !slices.Contains(routed, op) {
			t.Errorf("in openapi.yaml but not routed: %s", op)
		}
	}
}

// problemCodes returns the code enum of a problem+json response schema
// (Problem itself or an allOf that narrows its code).
func problemCodes(s *openapi3.SchemaRef) []string {
	if s == nil || s.Value == nil {
		return nil
	}
	var out []string
	if c := s.Value.Properties["code"]; c != nil && c.Value != nil {
		for _, v := range c.Value.Enum {
			out = append(out, v.(string))
		}
	}
	for _, sub := range s.Value.AllOf {
		if sub.Ref == "#/components/schemas/Problem" {
			continue
		}
		out = append(out, problemCodes(sub)...)
	}
	return out
}

func TestProblemCodesMatchTheDomain(t *testing.T) {
	doc := loadDoc(t)
	code := doc.Components.Schemas["Code"]
	if code == nil || code.Value == nil {
		t.Fatal("no Code schema")
	}
	var enum []string
	for _, v := range code.Value.Enum {
		enum = append(enum, v.(string))
	}
	problem := doc.Components.Schemas["Problem"].Value.Properties["code"]
	if problem == nil || problem.Ref != "#/components/schemas/Code" {
		t.Fatal("Problem.code must be a $ref to Code")
	}
	for _, c := range fencegate.Codes {
		if !slices.Contains(enum, string(c)) {
			t.Errorf("code %s of fencegate.Codes is missing from the Problem code enum", c)
		}
	}
	for _, c := range enum {
		if !slices.Contains(fencegate.Codes, fencegate.Code(c)) {
			t.Errorf("code %s of the Problem code enum is not in fencegate.Codes", c)
		}
	}
}

// TestErrorResponsesMatchStatusOf checks that every error response of every
// operation lists its codes, that each code's handlers.StatusOf is the
// response's status, and that every domain code is documented somewhere.
func TestErrorResponsesMatchStatusOf(t *testing.T) {
	doc := loadDoc(t)
	seen := map[string]bool{}
	for _, op := range specOperations(doc) {
		method, path, _ := strings.Cut(op, " ")
		o := doc.Paths.Value(path).GetOperation(method)
		for status, resp := range o.Responses.Map() {
			n, err := strconv.Atoi(status)
			if err != nil || n < 400 {
				continue
			}
			mt := resp.Value.Content.Get("application/problem+json")
			if mt == nil {
				t.Errorf("%s: response %s is not problem+json", op, status)
				continue
			}
			codes := problemCodes(mt.Schema)
			if len(codes) == 0 {
				t.Errorf("%s: response %s lists no codes", op, status)
			}
			for _, c := range codes {
				seen[c] = true
				if got := handlers.StatusOf(fencegate.Code(c)); got != n {
					t.Errorf("%s: code %s documented under %d, StatusOf gives %d", op, c, n, got)
				}
			}
		}
	}
	for _, c := range fencegate.Codes {
		if !seen[string(c)] {
			t.Errorf("code %s is not documented on any operation", c)
		}
	}
}

// TestOperatorRoutesNeedTheAdminScheme checks that the operator routes, and
// only they, declare the admin credential, and that they document 401
// UNAUTHENTICATED and 403 FORBIDDEN.
func TestOperatorRoutesNeedTheAdminScheme(t *testing.T) {
	doc := loadDoc(t)
	if s := doc.Components.SecuritySchemes["admin"]; s == nil || s.Value == nil || s.Value.Scheme != "bearer" {
		t.Fatal("no bearer security scheme named admin")
	}
	for _, op := range specOperations(doc) {
		method, path, _ := strings.Cut(op, " ")
		o := doc.Paths.Value(path).GetOperation(method)
		operator := strings.HasPrefix(path, "/v1/admin/") || path == "/v1/unknown/{receiptId}/resolve"
		admin := o.Security != nil && len(*o.Security) == 1 && (*o.Security)[0]["admin"] != nil
		if operator != admin {
			t.Errorf("%s: operator route %v, but admin security %v", op, operator, admin)
		}
		if !operator {
			continue
		}
		for status, code := range map[string]string{"401": "UNAUTHENTICATED", "403": "FORBIDDEN"} {
			r := o.Responses.Value(status)
			if r == nil || r.Value.Content.Get("application/problem+json") == nil ||
				!slices.Contains(problemCodes(r.Value.Content.Get("application/problem+json").Schema), code) {
				t.Errorf("%s: no %s %s response", op, status, code)
			}
		}
	}
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
	var m map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return rec.Header(), m
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

// TestRealResponsesMatchTheSpec drives the router through a lease, fenced
// writes, reads and rejections, validating every answer against the spec.
func TestRealResponsesMatchTheSpec(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}

	e.call("GET", "/healthz", "", nil, "", 200)
	_, p := e.call("GET", "/v1/receipts?operationId=op-1", "", nil, "", 401)
	wantCode(t, p, fencegate.CodeUnauthenticated)
	_, p = e.call("GET", "/v1/receipts/rcpt_nope", tokA, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	_, p = e.call("GET", "/v1/resources/local/inv/7", tokA, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	_, p = e.call("GET", "/v1/receipts?resource=local/inv/7", tokA, nil, "", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)

	// Lease, then fenced writes under it.
	_, lease := e.call("POST", "/v1/leases", tokA, json,
		`{"resource":"local/inv/7","requestId":"req-1","ttlMs":30000,"operationId":"op-1","operationCategory":"write"}`, 201)
	grant, _ := lease["grant"].(string)
	status, _ := lease["statusProof"].(string)
	leaseID, _ := lease["lease"].(string)
	_, p = e.call("POST", "/v1/leases", tokB, json,
		`{"resource":"local/inv/7","requestId":"req-b","ttlMs":30000,"operationId":"op-1"}`, 409)
	wantCode(t, p, fencegate.CodeLeaseHeld)
	_, p = e.call("POST", "/v1/leases", tokA, json, `{"resource":"local/../x","requestId":"r","ttlMs":1000,"operationId":"o"}`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	// Long-poll: the wait ends before the holder releases (LEASE_HELD); a
	// negative wait is refused.
	_, p = e.call("POST", "/v1/leases", tokB, json,
		`{"resource":"local/inv/7","requestId":"req-b","ttlMs":30000,"operationId":"op-1","waitMs":30}`, 409)
	wantCode(t, p, fencegate.CodeLeaseHeld)
	_, p = e.call("POST", "/v1/leases", tokB, json,
		`{"resource":"local/inv/7","requestId":"req-b","ttlMs":30000,"operationId":"op-1","waitMs":-1}`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)

	h, rc := e.call("PUT", "/v1/objects/local/inv/7/part-1", tokA, fenced(grant, status, 1), "hello", 200)
	if h.Get("Fence-Receipt") == "" || rc["receiptId"] != h.Get("Fence-Receipt") {
		t.Errorf("Fence-Receipt %q does not name the receipt %v", h.Get("Fence-Receipt"), rc["receiptId"])
	}
	h, _ = e.call("PUT", "/v1/objects/local/inv/7/part-1", tokA, fenced(grant, status, 1), "hello", 200)
	if h.Get("Fence-Replay") != "true" {
		t.Errorf("replay without Fence-Replay: true")
	}
	h, p = e.call("PUT", "/v1/objects/local/inv/7/part-1", tokA, fenced(grant, status, 1), "other", 409)
	wantCode(t, p, fencegate.CodeQuarantined)
	if h.Get("Fence-Receipt") == "" || h.Get("Fence-Receipt") != p["receiptId"] {
		t.Errorf("QUARANTINED: Fence-Receipt %q does not name the receipt %v", h.Get("Fence-Receipt"), p["receiptId"])
	}
	_, p = e.call("PUT", "/v1/objects/local/inv/7/part-1", tokA, fenced(grant, status, 3), "x", 409)
	wantCode(t, p, fencegate.CodeSegmentOutOfOrder)
	_, p = e.call("PUT", "/v1/objects/local/inv/70", tokA, fenced(grant, status, 2), "x", 403)
	wantCode(t, p, fencegate.CodeResourceMismatch)
	_, p = e.call("PUT", "/v1/objects/local/inv/7/x", tokB, fenced(grant, status, 2), "x", 403)
	wantCode(t, p, fencegate.CodeOwnerMismatch)
	_, p = e.call("PUT", "/v1/objects/local/inv/7/x", tokA, fenced("a.b.c", status, 2), "x", 401)
	wantCode(t, p, fencegate.CodeGrantInvalid)
	_, p = e.call("PUT", "/v1/objects/local/inv/7/x", tokA, map[string]string{"Fence-Grant": grant}, "x", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("PUT", "/v1/objects/local/inv/7/../8", tokA, fenced(grant, status, 2), "x", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("PUT", "/v1/objects/local/inv%2F7", tokA, fenced(grant, status, 2), "x", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("PUT", "/v1/objects/nostore/inv/7", tokA, fenced(grant, status, 2), "x", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	e.call("DELETE", "/v1/objects/local/inv/7/part-2", tokA, fenced(grant, status, 2), "", 200)

	// Reads.
	h, _ = e.call("GET", "/v1/objects/local/inv/7/part-1", tokA, nil, "", 200)
	if h.Get("ETag") == "" || h.Get("Fence-Token") == "" || h.Get("Fence-Receipt") != rc["receiptId"] {
		t.Errorf("read lacks fence headers: %v", h)
	}
	e.call("HEAD", "/v1/objects/local/inv/7/part-1", tokA, nil, "", 200)
	_, p = e.call("GET", "/v1/objects/local/inv/7/none", tokA, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	e.call("GET", "/v1/receipts?operationId=op-1", tokA, nil, "", 200)
	fence := strconv.FormatFloat(rc["fenceToken"].(float64), 'f', 0, 64)
	e.call("GET", "/v1/receipts?resource=local/inv/7&fence="+fence+"&segment=1", tokA, nil, "", 200)
	e.call("GET", "/v1/receipts/"+h.Get("Fence-Receipt"), tokA, nil, "", 200)
	e.call("GET", "/v1/resources/local/inv/7", tokA, nil, "", 200)
	e.call("GET", "/v1/quarantine", tokA, nil, "", 200)
	e.call("GET", "/v1/quarantine?resource=local/inv/7", tokA, nil, "", 200)
	e.call("GET", "/v1/unknown", tokA, nil, "", 200)

	// Lease lifecycle.
	e.call("GET", "/v1/leases/"+leaseID, tokA, nil, "", 200)
	_, p = e.call("GET", "/v1/leases/lease_nope", tokA, nil, "", 404)
	wantCode(t, p, fencegate.CodeNotFound)
	e.call("POST", "/v1/leases/"+leaseID+"/renew", tokA, json, `{"ttlMs":30000}`, 200)
	_, p = e.call("POST", "/v1/leases/"+leaseID+"/renew", tokA, json, `{"ttlMs":30000,"extra":1}`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("POST", "/v1/leases/"+leaseID+"/renew", tokB, json, `{"ttlMs":30000}`, 403)
	wantCode(t, p, fencegate.CodeOwnerMismatch)
	_, p = e.call("DELETE", "/v1/leases/"+leaseID, tokB, nil, "", 403)
	wantCode(t, p, fencegate.CodeOwnerMismatch)
	e.call("DELETE", "/v1/leases/"+leaseID, tokA, nil, "", 200)
	e.call("DELETE", "/v1/leases/"+leaseID, tokA, nil, "", 200)
	_, p = e.call("POST", "/v1/leases/"+leaseID+"/renew", tokA, json, `{"ttlMs":30000}`, 409)
	wantCode(t, p, fencegate.CodeLeaseNotHeld)

	// A fenced call to a fronted API: the upstream's answer, then its replay.
	_, lease = e.call("POST", "/v1/leases", tokA, json,
		`{"resource":"payouts/acct-1","requestId":"req-p","ttlMs":30000,"operationId":"pay-1"}`, 201)
	grant, _ = lease["grant"].(string)
	status, _ = lease["statusProof"].(string)
	call := fenced(grant, status, 1)
	call["Content-Type"] = "application/json"
	h, _ = e.call("POST", "/v1/apis/payouts/v1/accounts/acct-1/payouts", tokA, call, `{"amount":100}`, 201)
	if h.Get("Fence-Receipt") == "" {
		t.Error("API answer without Fence-Receipt")
	}
	h, _ = e.call("POST", "/v1/apis/payouts/v1/accounts/acct-1/payouts", tokA, call, `{"amount":100}`, 201)
	if h.Get("Fence-Replay") != "true" {
		t.Error("API replay without Fence-Replay: true")
	}
	_, p = e.call("POST", "/v1/apis/payouts/v1/accounts/acct-2/payouts", tokA, fenced(grant, status, 2), `{}`, 403)
	wantCode(t, p, fencegate.CodeResourceMismatch)
	_, p = e.call("PUT", "/v1/apis/payouts/v1/accounts/acct-1/payouts", tokA, fenced(grant, status, 2), `{}`, 404)
	wantCode(t, p, fencegate.CodeNotFound)
	_, p = e.call("POST", "/v1/apis/nope/v1/x", tokA, fenced(grant, status, 2), `{}`, 404)
	wantCode(t, p, fencegate.CodeNotFound)
	_, p = e.call("POST", "/v1/unknown/"+h.Get("Fence-Receipt")+"/resolve", tokA, json, `{"state":"NOT_APPLIED"}`, 403)
	wantCode(t, p, fencegate.CodeForbidden)
	_, p = e.call("POST", "/v1/unknown/"+h.Get("Fence-Receipt")+"/resolve", "", json, `{"state":"NOT_APPLIED"}`, 401)
	wantCode(t, p, fencegate.CodeUnauthenticated)
	_, p = e.call("POST", "/v1/unknown/"+h.Get("Fence-Receipt")+"/resolve", tokAdmin, json, `{"state":"NOT_APPLIED"}`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("POST", "/v1/unknown/rcpt_nope/resolve", tokAdmin, json, `{"state":"COMMITTED","note":"checked"}`, 404)
	wantCode(t, p, fencegate.CodeNotFound)
}

// TestAdminResponsesMatchTheSpec drives every operator route: success, no or
// an unknown credential (401), a workload credential (403), bad input (400),
// validating every answer against the spec.
func TestAdminResponsesMatchTheSpec(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/admin/state", ""},
		{"POST", "/v1/admin/epochs/7/revoke", ""},
		{"POST", "/v1/admin/keys/rotate", ""},
		{"POST", "/v1/admin/floor", `{"floor":100}`},
		{"PUT", "/v1/admin/modes", `{"pattern":"local/*","mode":"shadow","breakGlass":true}`},
		{"POST", "/v1/admin/policy/bump", ""},
		{"GET", "/v1/admin/trust-bundle", ""},
		{"PUT", "/v1/admin/trust-bundle", `{"version":1,"keys":[]}`},
	}
	for _, r := range routes {
		_, p := e.call(r.method, r.path, "", json, r.body, 401)
		wantCode(t, p, fencegate.CodeUnauthenticated)
		_, p = e.call(r.method, r.path, "not-a-token", json, r.body, 401)
		wantCode(t, p, fencegate.CodeUnauthenticated)
		_, p = e.call(r.method, r.path, tokA, json, r.body, 403)
		wantCode(t, p, fencegate.CodeForbidden)
	}
	if e.admin.policy != 1 || len(e.admin.revoked) != 0 || e.admin.floor != 0 || e.admin.verifier.Bundle().Version() != 1 ||
		len(e.admin.modes.Rules()) != 0 {
		t.Fatal("a refused admin request changed the state")
	}

	_, st := e.call("GET", "/v1/admin/state", tokAdmin, nil, "", 200)
	if st["trustBundleVersion"] != float64(1) || st["issuerEpoch"] != float64(1) {
		t.Errorf("state %v", st)
	}
	_, st = e.call("POST", "/v1/admin/policy/bump", tokAdmin, nil, "", 200)
	if st["policyGeneration"] != float64(2) {
		t.Errorf("policy not bumped: %v", st)
	}
	_, st = e.call("POST", "/v1/admin/epochs/7/revoke", tokAdmin, nil, "", 200)
	if !slices.Equal(st["revokedEpochs"].([]any), []any{float64(7)}) {
		t.Errorf("epoch 7 not revoked: %v", st)
	}
	_, p := e.call("POST", "/v1/admin/epochs/0/revoke", tokAdmin, nil, "", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("POST", "/v1/admin/epochs/x/revoke", tokAdmin, nil, "", 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	e.call("POST", "/v1/admin/floor", tokAdmin, json, `{"floor":100}`, 200)
	_, p = e.call("POST", "/v1/admin/floor", tokAdmin, json, `{"floor":-1}`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("POST", "/v1/admin/floor", tokAdmin, json, `{"floor":1,"extra":true}`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	// Enforcement modes: enforce is always allowed; shadow needs break-glass
	// unless the pattern is already shadow; bad patterns, modes and bodies
	// are refused.
	_, st = e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/prod/*","mode":"enforce"}`, 200)
	if m, _ := jsonMarshal(st["modes"]); m != `[{"mode":"enforce","pattern":"local/prod/*"}]` {
		t.Errorf("modes after enforce: %v", st["modes"])
	}
	_, p = e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/prod/*","mode":"shadow"}`, 403)
	wantCode(t, p, fencegate.CodeForbidden)
	_, p = e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/new/*","mode":"shadow","breakGlass":false}`, 403)
	wantCode(t, p, fencegate.CodeForbidden)
	_, st = e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/stage","mode":"shadow","breakGlass":true}`, 200)
	if len(st["modes"].([]any)) != 2 {
		t.Errorf("modes after break-glass: %v", st["modes"])
	}
	e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/stage","mode":"shadow"}`, 200) // already shadow
	for _, body := range []string{
		`{"pattern":"local/*","mode":"audit"}`,
		`{"pattern":"local/[","mode":"enforce"}`,
		`{"pattern":"","mode":"enforce"}`,
		`{"pattern":"local/*","mode":"enforce","extra":1}`,
		`{"pattern":"local/*"`,
	} {
		_, p = e.call("PUT", "/v1/admin/modes", tokAdmin, json, body, 400)
		wantCode(t, p, fencegate.CodeInvalidRequest)
	}
	if got := e.admin.modes.Rules(); len(got) != 2 || e.admin.modes.For("local/prod/x") != gateway.Enforce ||
		e.admin.modes.For("local/stage/x") != gateway.Shadow {
		t.Errorf("modes after refused puts: %v", got)
	}
	_, st = e.call("POST", "/v1/admin/keys/rotate", tokAdmin, nil, "", 200)
	if st["issuerEpoch"] != float64(2) || st["trustBundleVersion"] != float64(2) || len(st["keyIds"].([]any)) != 2 {
		t.Errorf("rotation: %v", st)
	}

	// The trust bundle: read it, put it back one version up, refuse a lower
	// version, a bundle without the registry's key, and junk.
	_, bundle := e.call("GET", "/v1/admin/trust-bundle", tokAdmin, nil, "", 200)
	if bundle["version"] != float64(2) || len(bundle["keys"].([]any)) != 2 {
		t.Fatalf("bundle %v", bundle)
	}
	withVersion := func(v int) string {
		b := map[string]any{"version": v, "keys": bundle["keys"]}
		out, err := jsonMarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	_, st = e.call("PUT", "/v1/admin/trust-bundle", tokAdmin, json, withVersion(3), 200)
	if st["trustBundleVersion"] != float64(3) {
		t.Errorf("bundle not installed: %v", st)
	}
	_, p = e.call("PUT", "/v1/admin/trust-bundle", tokAdmin, json, withVersion(1), 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	other, err := proofs.GenerateEd25519Signer("other-key")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := proofs.NewBundle(9, other.BundleKey(9))
	if err != nil {
		t.Fatal(err)
	}
	data, err := foreign.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	_, p = e.call("PUT", "/v1/admin/trust-bundle", tokAdmin, json, string(data), 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	_, p = e.call("PUT", "/v1/admin/trust-bundle", tokAdmin, json, `{"version":4`, 400)
	wantCode(t, p, fencegate.CodeInvalidRequest)
	if v := e.admin.verifier.Bundle().Version(); v != 3 {
		t.Errorf("bundle version %d after refused puts, want 3", v)
	}
}

// TestAdminWithoutRegistryOrOperators covers the other configurations: no
// in-process registry (rotate and floor are UNSUPPORTED), no operator
// credentials (every operator route is FORBIDDEN), and a panicking admin
// (500 INTERNAL from the recoverer).
func TestAdminWithoutRegistryOrOperators(t *testing.T) {
	json := map[string]string{"Content-Type": "application/json"}
	e := newEnv(t, func(_ *handlers.Server, a *fakeAdmin) { a.regKID = "" })
	_, p := e.call("POST", "/v1/admin/keys/rotate", tokAdmin, nil, "", 501)
	wantCode(t, p, fencegate.CodeUnsupported)
	_, p = e.call("POST", "/v1/admin/floor", tokAdmin, json, `{"floor":5}`, 501)
	wantCode(t, p, fencegate.CodeUnsupported)
	_, st := e.call("GET", "/v1/admin/state", tokAdmin, nil, "", 200)
	if _, ok := st["issuerEpoch"]; ok {
		t.Errorf("issuerEpoch without a registry: %v", st)
	}
	e.call("POST", "/v1/admin/epochs/1/revoke", tokAdmin, nil, "", 200)

	e = newEnv(t, func(s *handlers.Server, _ *fakeAdmin) { s.AdminAuth = nil })
	for _, tok := range []string{tokAdmin, tokA, ""} {
		_, p = e.call("GET", "/v1/admin/state", tok, nil, "", 403)
		wantCode(t, p, fencegate.CodeForbidden)
		_, p = e.call("POST", "/v1/unknown/rcpt_nope/resolve", tok, json, `{"state":"COMMITTED"}`, 403)
		wantCode(t, p, fencegate.CodeForbidden)
	}

	e = newEnv(t, func(_ *handlers.Server, a *fakeAdmin) { a.panics = true })
	_, p = e.call("GET", "/v1/admin/state", tokAdmin, nil, "", 500)
	wantCode(t, p, fencegate.CodeInternal)
}

func jsonMarshal(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// TestResponseValidationCatchesMismatches makes sure the validation above is
// not vacuous: answers the spec does not allow are refused.
func TestResponseValidationCatchesMismatches(t *testing.T) {
	e := newEnv(t)
	bad := []struct {
		name, method, path string
		status             int
		ct, body           string
	}{
		{"code not listed for 404", "GET", "/v1/receipts/x", 404, "application/problem+json",
			`{"type":"urn:fencegate:problem:stale_owner","title":"stale owner","status":404,"code":"STALE_OWNER"}`},
		{"unknown code", "GET", "/v1/receipts", 401, "application/problem+json",
			`{"type":"urn:fencegate:problem:nope","title":"nope","status":401,"code":"NOPE"}`},
		{"undocumented status", "GET", "/v1/receipts", 418, "application/problem+json", `{}`},
		{"receipt without fenceToken", "GET", "/v1/receipts/x", 200, "application/json",
			`{"receiptId":"r","resource":"a/b","target":"objects/a/b","method":"PUT","segment":1,"operationId":"o",
			  "operationRoot":"r","lease":"l","owner":"w","grantDigest":"sha256:` + strings.Repeat("0", 64) + `",
			  "payloadDigest":"sha256:` + strings.Repeat("0", 64) + `","state":"COMMITTED","createdAt":"2024-01-01T00:00:00Z"}`},
		{"admin 403 with a binding code", "GET", "/v1/admin/state", 403, "application/problem+json",
			`{"type":"urn:fencegate:problem:owner_mismatch","title":"owner mismatch","status":403,"code":"OWNER_MISMATCH"}`},
		{"admin state without keyIds", "POST", "/v1/admin/policy/bump", 200, "application/json",
			`{"policyGeneration":2,"revokedEpochs":[],"trustBundleVersion":1}`},
		{"admin state without modes", "GET", "/v1/admin/state", 200, "application/json",
			`{"policyGeneration":2,"revokedEpochs":[],"trustBundleVersion":1,"keyIds":[]}`},
		{"mode rule with an unknown mode", "PUT", "/v1/admin/modes", 200, "application/json",
			`{"policyGeneration":2,"revokedEpochs":[],"trustBundleVersion":1,"keyIds":[],"modes":[{"pattern":"a/*","mode":"audit"}]}`},
		{"stored receipt without a grant digest", "PUT", "/v1/objects/local/a", 200, "application/json",
			`{"receiptId":"rcpt_1","resource":"local/a","target":"objects/local/a","method":"PUT","fenceToken":0,"segment":1,
			  "operationId":"","operationRoot":"shadow:rcpt_1","lease":"","owner":"w","grantDigest":"","payloadDigest":"sha256:` +
				strings.Repeat("0", 64) + `","state":"COMMITTED","createdAt":"2024-01-01T00:00:00Z"}`},
		{"trust bundle key without epoch", "GET", "/v1/admin/trust-bundle", 200, "application/json",
			`{"version":1,"keys":[{"kty":"OKP","crv":"Ed25519","x":"AA","kid":"k","alg":"EdDSA"}]}`},
	}
	for _, b := range bad {
		req := httptest.NewRequest(b.method, "http://gw"+b.path, nil)
		route, params := e.find(b.method, req.URL.Path)
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 b.status,
			Header:                 http.Header{"Content-Type": {b.ct}},
			Options:                &openapi3filter.Options{IncludeResponseStatus: true},
		}
		in.SetBodyBytes(bytes.Clone([]byte(b.body)))
		if err := openapi3filter.ValidateResponse(context.Background(), in); err == nil {
			t.Errorf("%s: accepted by the spec", b.name)
		}
	}
}

// TestShadowResponsesMatchTheSpec puts a pattern in shadow mode and drives
// refused object writes under it: they are forwarded and answered 200 with
// Fence-Mode and Fence-Verdict and an unstored shadow_ receipt, while a
// resource outside the pattern is still refused.
func TestShadowResponsesMatchTheSpec(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}
	e.call("PUT", "/v1/admin/modes", tokAdmin, json, `{"pattern":"local/stage","mode":"shadow","breakGlass":true}`, 200)

	_, lease := e.call("POST", "/v1/leases", tokA, json,
		`{"resource":"local/stage/1","requestId":"req-s","ttlMs":30000,"operationId":"op-s"}`, 201)
	grant, _ := lease["grant"].(string)
	status, _ := lease["statusProof"].(string)
	h, rc := e.call("PUT", "/v1/objects/local/stage/1/a", tokA, fenced(grant, status, 1), "one", 200)
	if h.Get("Fence-Mode") != "" || h.Get("Fence-Receipt") != rc["receiptId"] {
		t.Errorf("an admitted write in shadow mode: %v %v", h, rc)
	}
	_, state := e.call("GET", "/v1/resources/local/stage/1", tokA, nil, "", 200)

	shadowed := func(h http.Header, rc map[string]any, verdict fencegate.Code) {
		t.Helper()
		id, _ := rc["receiptId"].(string)
		if h.Get("Fence-Mode") != "shadow" || h.Get("Fence-Verdict") != string(verdict) || h.Get("Fence-Receipt") != "" ||
			!strings.HasPrefix(id, "shadow_") {
			t.Errorf("shadow answer for %s: headers %v, receipt %v", verdict, h, rc)
		}
		_, p := e.call("GET", "/v1/receipts/"+id, tokA, nil, "", 404)
		wantCode(t, p, fencegate.CodeNotFound)
	}
	h, rc = e.call("PUT", "/v1/objects/local/stage/1/a", tokA, fenced(grant, status, 3), "out of order", 200)
	shadowed(h, rc, fencegate.CodeSegmentOutOfOrder)
	h, rc = e.call("PUT", "/v1/objects/local/stage/1/b", tokA, fenced("a.b.c", status, 1), "bad grant", 200)
	shadowed(h, rc, fencegate.CodeGrantInvalid)
	if rc["grantDigest"] != "" || rc["fenceToken"] != float64(0) {
		t.Errorf("a refused grant left grant fields in the shadow receipt: %v", rc)
	}
	h, rc = e.call("PUT", "/v1/objects/local/stage/1/a", tokB, fenced(grant, status, 2), "not the owner", 200)
	shadowed(h, rc, fencegate.CodeOwnerMismatch)
	h, rc = e.call("DELETE", "/v1/objects/local/stage/1/b", tokA, fenced(grant, status, 5), "", 200)
	shadowed(h, rc, fencegate.CodeSegmentOutOfOrder)
	_, after := e.call("GET", "/v1/resources/local/stage/1", tokA, nil, "", 200)
	if after["highestFence"] != state["highestFence"] || after["lastSegmentSeq"] != state["lastSegmentSeq"] {
		t.Errorf("shadow answers moved the fence: %v -> %v", state, after)
	}
	rh, _ := e.call("GET", "/v1/objects/local/stage/1/a", tokA, nil, "", 200)
	if rh.Get("Fence-Receipt") == "" {
		t.Error("read of a shadow-forwarded object lacks its headers")
	}

	// Not shadowed: no caller credential, and resources outside the pattern.
	_, p := e.call("PUT", "/v1/objects/local/stage/1/a", "", fenced(grant, status, 2), "x", 401)
	wantCode(t, p, fencegate.CodeUnauthenticated)
	_, p = e.call("PUT", "/v1/objects/local/prod/1", tokA, fenced("a.b.c", status, 1), "x", 401)
	wantCode(t, p, fencegate.CodeGrantInvalid)

	// The spec refuses a verdict that shadow mode never forwards.
	req := httptest.NewRequest("PUT", "http://gw/v1/objects/local/stage/1/a", nil)
	route, params := e.find("PUT", req.URL.Path)
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 200,
		Header:                 http.Header{"Content-Type": {"application/json"}, "Fence-Mode": {"shadow"}, "Fence-Verdict": {"UNAUTHENTICATED"}},
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	body, _ := jsonMarshal(rc)
	in.SetBodyBytes([]byte(body))
	if err := openapi3filter.ValidateResponse(context.Background(), in); err == nil {
		t.Error("Fence-Verdict: UNAUTHENTICATED accepted by the spec")
	}
}

// TestLongPollAcquire takes a lease with waitMs while another holder
// releases it.
func TestLongPollAcquire(t *testing.T) {
	e := newEnv(t)
	json := map[string]string{"Content-Type": "application/json"}
	_, lease := e.call("POST", "/v1/leases", tokA, json,
		`{"resource":"local/inv/9","requestId":"req-1","ttlMs":30000,"operationId":"op-9"}`, 201)
	leaseID, _ := lease["lease"].(string)
	done := make(chan int, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		req := httptest.NewRequest("DELETE", "http://gw/v1/leases/"+leaseID, nil)
		req.Header.Set("Authorization", "Bearer "+tokA)
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		done <- rec.Code
	}()
	_, got := e.call("POST", "/v1/leases", tokB, json,
		`{"resource":"local/inv/9","requestId":"req-2","ttlMs":30000,"operationId":"op-9","waitMs":20000}`, 201)
	if code := <-done; code != http.StatusOK {
		t.Errorf("release: %d", code)
	}
	if got["owner"] != ownerB || got["fenceToken"].(float64) <= lease["fenceToken"].(float64) {
		t.Errorf("long-poll lease %v after %v", got, lease)
	}
}
