package handlers_test

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/internal/logctx"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// requestRecorder is a handlers.Observer that keeps what it was told.
type requestRecorder struct {
	mu       sync.Mutex
	routes   []string
	refusals []fencegate.Code
}

func (r *requestRecorder) Request(route, method string, status int, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routes = append(r.routes, method+" "+route)
}

func (r *requestRecorder) Refusal(c fencegate.Code) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refusals = append(r.refusals, c)
}

// observedEnv is newEnv with an observer and a JSON log in a buffer.
func observedEnv(t *testing.T) (*env, *requestRecorder, *bytes.Buffer) {
	e, rec, logs, _ := tracedEnv(t)
	return e, rec, logs
}

// tracedEnv is observedEnv whose handlers and gateway record spans in memory.
func tracedEnv(t *testing.T) (*env, *requestRecorder, *bytes.Buffer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
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
	var logs bytes.Buffer
	log, err := logctx.NewLogger(&logs, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	pol := &policy{}
	pol.gen.Store(1)
	gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: st, Policy: pol, Now: kit.Now, Log: log, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	rec := &requestRecorder{}
	objects := &countingStore{ObjectStore: loc}
	srv := &handlers.Server{
		Gateway: gw, Stores: map[string]fencegate.ObjectStore{"local": objects},
		Auth:     handlers.NewBearerTokens(map[string]string{tokA: ownerA, tokB: ownerB}),
		SpoolDir: t.TempDir(), MaxBody: 1 << 20, Log: log, Observe: rec, Refused: rec.Refusal, Tracer: tp,
	}
	return &env{t: t, kit: kit, store: st, objects: objects, policy: pol, h: handlers.Router(srv)}, rec, &logs, exp
}

// TestRequestIDIsTakenOrMadeEchoedAndInEveryProblemAndLogLine: a well-formed
// X-Request-Id is echoed and named by the problem body and the refusal's log
// line; a malformed one (which could forge log fields) is replaced by a
// generated ID, echoed too.
func TestRequestIDIsTakenOrMadeEchoedAndInEveryProblemAndLogLine(t *testing.T) {
	e, _, logs := observedEnv(t)
	r := e.do("GET", "/v1/receipts/nope", "", map[string]string{"X-Request-Id": "abc-123"}, "")
	wantProblem(t, r, http.StatusUnauthorized, "UNAUTHENTICATED")
	if r.header.Get("X-Request-Id") != "abc-123" || r.json["requestId"] != "abc-123" {
		t.Fatalf("request ID not echoed: %v %s", r.header, r.body)
	}
	lines := logLines(t, logs, "request refused")
	if len(lines) == 0 || lines[len(lines)-1]["requestId"] != "abc-123" {
		t.Fatalf("refusal log line lacks the request ID: %s", logs)
	}
	for _, bad := range []string{"a b", "x\ny=1", strings.Repeat("a", 129), ""} {
		r := e.do("GET", "/v1/receipts/nope", "", map[string]string{"X-Request-Id": bad}, "")
		got := r.header.Get("X-Request-Id")
		if got == bad || !strings.HasPrefix(got, "req_") || r.json["requestId"] != got {
			t.Fatalf("X-Request-Id %q: answered %q, body %s", bad, got, r.body)
		}
	}
}

// TestRefusalIsLoggedWithCallerResourceFenceSegmentAndCodeButNoToken: a
// stale write's log line names who, what, which fence and segment, and why,
// and never carries the grant or status token or the bearer credential; the
// observer counts the refusal by code and the request by its route pattern.
func TestRefusalIsLoggedWithCallerResourceFenceSegmentAndCodeButNoToken(t *testing.T) {
	e, rec, logs := observedEnv(t)
	newer := e.grant("local/inv", ownerA, 9, nil)
	if r := e.put(tokA, newer, "local/inv/1", 1, "new"); r.status != http.StatusOK {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	old := e.grant("local/inv", ownerA, 8, nil)
	logs.Reset()
	r := e.put(tokA, old, "local/inv/1", 1, "old")
	if r.code() != "STALE_OWNER" {
		t.Fatalf("stale write: %d %s", r.status, r.body)
	}
	var refusal map[string]any
	for _, l := range logLines(t, logs, "request refused") {
		refusal = l
	}
	if refusal == nil {
		t.Fatalf("no refusal line: %s", logs)
	}
	for k, want := range map[string]any{"caller": ownerA, "resource": "local/inv/1", "fence": 8.0, "segment": 1.0, "code": "STALE_OWNER"} {
		if refusal[k] != want {
			t.Errorf("refusal %s = %v, want %v (%v)", k, refusal[k], want, refusal)
		}
	}
	for _, secret := range []string{old.grant, old.status, tokA} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("log carries a token: %s", logs)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.refusals) != 1 || rec.refusals[0] != fencegate.CodeStaleOwner {
		t.Fatalf("refusals %v", rec.refusals)
	}
	if last := rec.routes[len(rec.routes)-1]; last != "PUT /v1/objects/{store}/*" {
		t.Fatalf("route %q", last)
	}
}

// TestCallersTraceparentIsContinuedThroughTheAcceptancePoint: a write
// carrying a W3C traceparent gets a server span in that trace, and the
// verify, admit, effect and settle spans under it; its log lines name the
// trace.
func TestCallersTraceparentIsContinuedThroughTheAcceptancePoint(t *testing.T) {
	e, _, logs, exp := tracedEnv(t)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	c := e.grant("local/inv", ownerA, 3, nil)
	r := e.do("PUT", "/v1/objects/local/inv/1", tokA, map[string]string{"Fence-Grant": c.grant, "Fence-Status": c.status,
		"Fence-Segment": "1", "traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}, "x")
	if r.status != http.StatusOK {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	got := map[string]bool{}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == traceID {
			got[s.Name] = true
		}
	}
	for _, name := range []string{"http PUT /v1/objects/{store}/*", "fencegate.verify", "fencegate.admit", "fencegate.effect", "fencegate.settle"} {
		if !got[name] {
			t.Errorf("no span %q in the caller's trace: %v", name, got)
		}
	}
	e.do("GET", "/v1/receipts/nope", "", map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}, "")
	if !strings.Contains(logs.String(), `"traceId":"`+traceID+`"`) {
		t.Errorf("log lines do not name the trace: %s", logs)
	}
}
