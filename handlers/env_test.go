package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

const (
	ownerA = prooftest.DefaultOwner
	ownerB = "spiffe://test/worker-b"
	tokA   = "token-a"
	tokB   = "token-b"
)

// countingStore counts the effects forwarded to an object store.
type countingStore struct {
	fencegate.ObjectStore
	puts, deletes atomic.Int64
	// lose, when set, makes the next Put or Delete and the Head after it
	// fail uncertainly; deaf, when set, makes the next Head fail.
	lose atomic.Bool
	deaf atomic.Bool
}

func (c *countingStore) Put(ctx context.Context, req fencegate.PutRequest) (string, error) {
	c.puts.Add(1)
	if c.lose.CompareAndSwap(true, false) {
		c.deaf.Store(true)
		return "", fencegate.Errorf(fencegate.CodeBackendUnavailable, "connection reset")
	}
	return c.ObjectStore.Put(ctx, req)
}

func (c *countingStore) Head(ctx context.Context, key string) (fencegate.ObjectInfo, error) {
	if c.deaf.CompareAndSwap(true, false) {
		return fencegate.ObjectInfo{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "connection reset")
	}
	return c.ObjectStore.Head(ctx, key)
}

func (c *countingStore) Delete(ctx context.Context, key, ifMatch string) error {
	c.deletes.Add(1)
	if c.lose.CompareAndSwap(true, false) {
		c.deaf.Store(true)
		return fencegate.Errorf(fencegate.CodeBackendUnavailable, "connection reset")
	}
	return c.ObjectStore.Delete(ctx, key, ifMatch)
}

// policy is a mutable gateway.Policy for tests.
type policy struct {
	gen     atomic.Uint64
	revoked atomic.Uint64 // one revoked epoch, 0 for none
}

func (p *policy) PolicyGeneration() uint64   { return p.gen.Load() }
func (p *policy) EpochRevoked(e uint64) bool { return e != 0 && p.revoked.Load() == e }

// env is an in-process gateway on the embedded store and a local directory.
type env struct {
	t       *testing.T
	kit     *prooftest.Kit
	store   fencegate.FenceStore
	objects *countingStore
	policy  *policy
	h       http.Handler
	srv     *handlers.Server
	logs    *lockedBuffer
}

// lockedBuffer is a bytes.Buffer safe for the server's concurrent log writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newEnv(t *testing.T) *env { t.Helper(); return newEnvWith(t, nil) }

// newEnvWith is newEnv with mod applied to the server before it is routed.
func newEnvWith(t *testing.T, mod func(*handlers.Server)) *env {
	t.Helper()
	kit := prooftest.New(t)
	st, err := embedded.Open(filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	loc, err := local.New("local", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pol := &policy{}
	pol.gen.Store(1)
	gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: st, Policy: pol, Now: kit.Now})
	if err != nil {
		t.Fatal(err)
	}
	objects := &countingStore{ObjectStore: loc}
	srv := &handlers.Server{
		Gateway: gw, Stores: map[string]fencegate.ObjectStore{"local": objects},
		Auth:      handlers.NewBearerTokens(map[string]string{tokA: ownerA, tokB: ownerB}),
		AdminAuth: handlers.NewBearerTokens(map[string]string{"ops": "ops", consoleSecret: "operator"}),
		SpoolDir:  t.TempDir(), MaxBody: 1 << 20,
	}
	logs := &lockedBuffer{}
	srv.Log = slog.New(slog.NewTextHandler(logs, nil))
	if mod != nil {
		mod(srv)
	}
	return &env{t: t, kit: kit, store: st, objects: objects, policy: pol, h: handlers.Router(srv), srv: srv, logs: logs}
}

// creds is a grant and a status proof, as a worker holds them.
type creds struct {
	grant, status string
	vg            fencegate.VerifiedGrant
}

// grant issues a grant for resource at fence, owned by owner, with its proof.
func (e *env) grant(resource, owner string, fence uint64, mod func(*fencegate.Grant)) creds {
	e.t.Helper()
	tok, vg := e.kit.VerifiedGrant(func(g *fencegate.Grant) {
		g.Resource, g.Owner, g.FenceToken = resource, owner, fence
		g.Lease = "lease-" + strconv.FormatUint(fence, 10)
		g.OperationRoot = "root-" + strconv.FormatUint(fence, 10)
		if mod != nil {
			mod(g)
		}
	})
	return creds{grant: tok, status: e.kit.Status(vg, nil), vg: vg}
}

type reply struct {
	status int
	header http.Header
	body   string
	json   map[string]any
}

func (r reply) code() string { s, _ := r.json["code"].(string); return s }

func (e *env) do(method, path, token string, hdr map[string]string, body string) reply {
	e.t.Helper()
	h := http.Header{}
	for k, v := range hdr {
		h.Set(k, v)
	}
	return e.doHeader(method, path, token, h, body)
}

// doHeader is do with a header that may repeat fields.
func (e *env) doHeader(method, path, token string, hdr http.Header, body string) reply {
	e.t.Helper()
	req := httptest.NewRequest(method, "http://gw"+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Result().Body)
	r := reply{status: w.Code, header: w.Result().Header, body: string(b)}
	_ = json.Unmarshal(b, &r.json)
	return r
}

func (e *env) put(token string, c creds, key string, seg int, body string) reply {
	e.t.Helper()
	return e.do("PUT", "/v1/objects/"+key, token, map[string]string{
		"Fence-Grant": c.grant, "Fence-Status": c.status, "Fence-Segment": strconv.Itoa(seg)}, body)
}

// snapshot is everything a rejected request must leave unchanged.
type snapshot struct {
	resource fencegate.ResourceState
	receipts string // every receipt, its ID and state, in every state
	object   string
	puts     int64
}

func (e *env) snap(resource, key string) snapshot {
	e.t.Helper()
	ctx := context.Background()
	var s snapshot
	s.resource, _ = e.store.Resource(ctx, resource)
	for _, st := range []fencegate.ReceiptState{fencegate.ReceiptPending, fencegate.ReceiptCommitted, fencegate.ReceiptFailed,
		fencegate.ReceiptUnknown, fencegate.ReceiptNotApplied} {
		l, err := e.store.ReceiptsByState(ctx, st, fencegate.Page{Limit: fencegate.MaxPageLimit})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, r := range l.Receipts {
			s.receipts += fmt.Sprintf("%s=%s@%d/%d ", r.ID, r.State, r.FenceToken, r.Segment)
		}
	}
	if rc, _, err := e.objects.Get(ctx, key); err == nil {
		b, _ := io.ReadAll(rc)
		rc.Close()
		s.object = string(b)
	}
	s.puts = e.objects.puts.Load()
	return s
}

func wantProblem(t *testing.T, r reply, status int, code string) {
	t.Helper()
	if r.status != status || r.code() != code {
		t.Fatalf("want %d %s, got %d %s", status, code, r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("problem served as %q", ct)
	}
}
