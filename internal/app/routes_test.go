package app

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/config"
)

// fencedRoutes are the routes that change a backend or the fence store on a
// worker's behalf: each must authenticate the grant and pass the fence check.
var fencedRoutes = map[string]bool{
	"PUT /v1/objects/{store}/*":    true,
	"DELETE /v1/objects/{store}/*": true,
	"POST /v1/apis/{api}/*":        true,
	"PUT /v1/apis/{api}/*":         true,
	"PATCH /v1/apis/{api}/*":       true,
	"DELETE /v1/apis/{api}/*":      true,
	// The query forms (?key=, ?path=) of the same routes, for generated clients.
	"PUT /v1/objects/{store}":    true,
	"DELETE /v1/objects/{store}": true,
	"POST /v1/apis/{api}":        true,
	"PUT /v1/apis/{api}":         true,
	"PATCH /v1/apis/{api}":       true,
	"DELETE /v1/apis/{api}":      true,
}

// routeWorld is the binary's handler over a data directory, with an upstream
// API that counts the requests that would change something.
type routeWorld struct {
	t        *testing.T
	h        http.Handler
	app      *App
	dir      string
	upstream atomic.Int64
	res      []string
}

func newRouteWorld(t *testing.T) *routeWorld {
	rw := &routeWorld{t: t, dir: t.TempDir()}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			rw.upstream.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"po_1"}`)
	}))
	t.Cleanup(up.Close)
	cfg := config.Dev()
	cfg.DataDir = rw.dir
	cfg.Identities = []config.Identity{{Name: "worker-a", Token: "token-a"}, {Name: "worker-b", Token: "token-b"}}
	cfg.Admins = []config.Identity{{Name: "admin", Token: "token-admin"}}
	cfg.APIs = []httpapi.APIConfig{{Name: "payouts", BaseURL: up.URL, Timeout: 5 * time.Second,
		Contract: httpapi.Contract{Idempotency: &httpapi.Idempotency{KeyRetention: 24 * time.Hour}},
		Routes: []httpapi.Route{
			{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"},
			{Method: "PUT", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"},
			{Method: "PATCH", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"},
			{Method: "DELETE", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"},
			{Method: "GET", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"},
		}}}
	a, err := Build(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(a.Close)
	a.ready.Store(true)
	rw.app, rw.h = a, a.handler
	return rw
}

func (rw *routeWorld) do(method, path, token string, hdr map[string]string, body string) (int, map[string]any) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	rw.h.ServeHTTP(rec, req)
	var m map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return rec.Code, m
}

type grant struct{ grant, status string }

func (rw *routeWorld) acquire(token, resource, reqID string) grant {
	code, m := rw.do("POST", "/v1/leases", token, nil,
		fmt.Sprintf(`{"resource":%q,"requestId":%q,"ttlMs":60000,"operationId":"op"}`, resource, reqID))
	if code != 200 && code != 201 {
		rw.t.Fatalf("acquire %s: %d %v", resource, code, m)
	}
	rw.res = append(rw.res, resource)
	g, _ := m["grant"].(string)
	st, _ := m["statusProof"].(string)
	return grant{g, st}
}

func fenced(g grant, seg int) map[string]string {
	return map[string]string{"Fence-Grant": g.grant, "Fence-Status": g.status, "Fence-Segment": fmt.Sprint(seg)}
}

// fingerprint is everything a mutation could change: the fence store's rows,
// receipts and quarantine, every object file, and the upstream's writes.
func (rw *routeWorld) fingerprint() string {
	ctx := context.Background()
	st := rw.app.Gateway.Store()
	h := sha256.New()
	for _, r := range rw.res {
		rs, err := st.Resource(ctx, r)
		fmt.Fprintf(h, "%s %+v %v\n", r, rs, err)
	}
	for _, s := range []fencegate.ReceiptState{fencegate.ReceiptPending, fencegate.ReceiptCommitted, fencegate.ReceiptFailed,
		fencegate.ReceiptUnknown, fencegate.ReceiptNotApplied} {
		p, err := st.ReceiptsByState(ctx, s, fencegate.Page{Limit: 1000})
		b, _ := json.Marshal(p)
		fmt.Fprintf(h, "%s %s %v\n", s, b, err)
	}
	q, _ := st.Quarantined(ctx, "", fencegate.Page{Limit: 1000})
	b, _ := json.Marshal(q)
	h.Write(b)
	objects := filepath.Join(rw.dir, "objects")
	_ = filepath.WalkDir(objects, func(p string, d fs.DirEntry, err error) error {
		// The local store's .tmp-* files hold no object (spares, and the
		// bytes of a write staged beside its admission, which a refused
		// write's staging leaves there: gateway/stage.go): no read sees
		// them and New removes them.
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".tmp-") {
			data, _ := os.ReadFile(p)
			fmt.Fprintf(h, "%s %x\n", p, sha256.Sum256(data))
		}
		return nil
	})
	fmt.Fprintf(h, "upstream %d", rw.upstream.Load())
	return fmt.Sprintf("%x", h.Sum(nil))
}

// concrete fills a route pattern for route number i: object keys and API
// accounts of their own resource.
func concrete(pattern string, i int) (path, resource string) {
	key := fmt.Sprintf("rt%d/k", i)
	resource = fmt.Sprintf("local/rt%d", i)
	path = pattern
	if strings.HasPrefix(pattern, "/v1/apis/") {
		resource = fmt.Sprintf("payouts/rt%d", i)
		path = strings.Replace(path, "*", fmt.Sprintf("v1/accounts/rt%d/payouts", i), 1)
	}
	if strings.HasPrefix(pattern, "/v1/resources/") {
		path = strings.Replace(path, "*", resource, 1)
	}
	path = strings.NewReplacer("{store}", "local", "{api}", "payouts", "*", key, "{id}", "x", "{lease}", "x",
		"{epoch}", "1", "{receiptId}", "x").Replace(path)
	switch pattern { // the query forms name the key or upstream path in the query
	case "/v1/objects/{store}":
		path += "?key=" + url.QueryEscape(key)
	case "/v1/apis/{api}":
		path += "?path=" + url.QueryEscape(fmt.Sprintf("/v1/accounts/rt%d/payouts", i))
	}
	return path, resource
}

// TestEveryMutatingRouteIsFenced walks every route the binary serves (chi's
// route tree) and proves that none changes a backend or the fence store for
// a caller without a credential, without a grant, with a forged grant, or
// with an authentic grant whose fence is stale; that the fenced routes do
// change state with a current grant (so the proof is not vacuous); and that
// no other route changes state for a worker. A new route that mutates
// without grant authentication and the fence check fails here.
func TestEveryMutatingRouteIsFenced(t *testing.T) {
	rw := newRouteWorld(t)
	routes, ok := rw.h.(chi.Routes)
	if !ok {
		t.Fatalf("the binary's handler is %T, not a chi router: walk what it serves", rw.h)
	}
	type route struct{ method, pattern string }
	var all []route
	if err := chi.Walk(routes, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		all = append(all, route{method, pattern})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].pattern+all[i].method < all[j].pattern+all[j].method })
	seen := map[string]bool{}
	for i, r := range all {
		name := r.method + " " + r.pattern
		t.Run(name, func(t *testing.T) {
			path, resource := concrete(r.pattern, i)
			// A's grant goes stale: B takes the resource over and writes.
			a := rw.acquire("token-a", resource, fmt.Sprint("a", i))
			if code, m := rw.do("DELETE", "/v1/leases/"+leaseOf(t, a), "token-a", nil, ""); code >= 300 {
				t.Fatalf("release: %d %v", code, m)
			}
			b := rw.acquire("token-b", resource, fmt.Sprint("b", i))
			first := "PUT"
			firstPath, _ := concrete("/v1/objects/{store}/*", i)
			if strings.HasPrefix(r.pattern, "/v1/apis/") {
				first, firstPath = "POST", path
			}
			if code, m := rw.do(first, firstPath, "token-b", fenced(b, 1), `{"n":1}`); code != 200 {
				t.Fatalf("B's first write: %d %v", code, m)
			}
			before := rw.fingerprint()
			for _, c := range []struct {
				what  string
				token string
				hdr   map[string]string
			}{
				{"no credential", "", fenced(b, 2)},
				{"an unknown credential", "token-x", fenced(b, 2)},
				{"no grant", "token-b", nil},
				{"a forged grant", "token-b", fenced(grant{"eyJhbGciOiJIUzI1NiIsImtpZCI6ImRldi0xIn0.e30.AAAA", b.status}, 2)},
				{"another worker's grant", "token-a", fenced(b, 2)},
				{"a stale grant", "token-a", fenced(a, 2)},
			} {
				code, m := rw.do(r.method, path, c.token, c.hdr, `{"n":2}`)
				if after := rw.fingerprint(); after != before {
					t.Fatalf("%s with %s answered %d %v and changed state", name, c.what, code, m)
				}
				if c.what == "a stale grant" && fencedRoutes[name] && m["code"] != string(fencegate.CodeStaleOwner) {
					t.Fatalf("%s with a stale grant: %d %v, want STALE_OWNER", name, code, m)
				}
			}
			code, m := rw.do(r.method, path, "token-b", fenced(b, 2), `{"n":2}`)
			changed := rw.fingerprint() != before
			switch {
			case fencedRoutes[name] && !changed:
				t.Fatalf("%s with a current grant answered %d %v and changed nothing: the proof is vacuous", name, code, m)
			case !fencedRoutes[name] && changed:
				t.Fatalf("%s changed state for a worker but is not a fenced route", name)
			}
			seen[name] = true
		})
	}
	for name := range fencedRoutes {
		if !seen[name] {
			t.Errorf("fenced route %s is not served any more: update fencedRoutes", name)
		}
	}
}

func leaseOf(t *testing.T, g grant) string {
	parts := strings.Split(g.grant, ".")
	if len(parts) != 3 {
		t.Fatalf("grant %q", g.grant)
	}
	var c struct {
		Lease string `json:"lease"`
	}
	raw, _ := decodeSegment(parts[1])
	_ = json.Unmarshal(raw, &c)
	return c.Lease
}

func decodeSegment(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }
