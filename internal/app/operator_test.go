package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/config"
)

// operatorApp builds a dev gateway with an operator listener, pprof as given.
func operatorApp(t *testing.T, pprof bool) *App {
	t.Helper()
	cfg := config.Dev()
	cfg.DataDir = t.TempDir()
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.Pprof = pprof
	cfg.Identities = []config.Identity{{Name: "worker-a", Token: "token-a"}}
	cfg.Admins = []config.Identity{{Name: "admin", Token: "token-admin"}}
	a, err := Build(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(a.Close)
	a.ready.Store(true)
	return a
}

func get(t *testing.T, h http.Handler, path, token string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

var pprofPaths = []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1",
	"/debug/pprof/symbol", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=0.1"}

// TestPprofIsOffByDefault: without pprof the operator listener serves
// /metrics and nothing under /debug/pprof/.
func TestPprofIsOffByDefault(t *testing.T) {
	a := operatorApp(t, false)
	op := a.operatorHandler()
	if code, body := get(t, op, "/metrics", ""); code != 200 || !strings.Contains(body, "fencegate_") {
		t.Fatalf("/metrics: %d %.200s", code, body)
	}
	for _, p := range pprofPaths {
		if code, _ := get(t, op, p, ""); code != http.StatusNotFound {
			t.Errorf("operator listener without pprof: GET %s = %d, want 404", p, code)
		}
	}
}

// TestPprofIsServedOnTheOperatorListenerOnly: with pprof the operator
// listener serves the index, named profiles, a CPU profile and an execution
// trace; the API listener answers none of them, with or without a
// credential.
func TestPprofIsServedOnTheOperatorListenerOnly(t *testing.T) {
	a := operatorApp(t, true)
	op := a.operatorHandler()
	for _, p := range pprofPaths {
		code, body := get(t, op, p, "")
		if code != 200 || body == "" {
			t.Errorf("operator listener with pprof: GET %s = %d (%d bytes), want 200 with a body", p, code, len(body))
		}
	}
	if _, body := get(t, op, "/debug/pprof/", ""); !strings.Contains(body, "Types of profiles") {
		t.Errorf("pprof index names no profiles: %.300s", body)
	}
	if _, body := get(t, op, "/debug/pprof/goroutine?debug=1", ""); !strings.Contains(body, "goroutine profile:") {
		t.Errorf("goroutine profile: %.300s", body)
	}
	// cmdline would answer os.Args, and with them the tokens given as flags.
	if code, body := get(t, op, "/debug/pprof/cmdline", ""); code != http.StatusNotFound || strings.Contains(body, os.Args[0]) {
		t.Errorf("GET /debug/pprof/cmdline = %d %.200q, want 404 without the command line", code, body)
	}
	if code, _ := get(t, op, "/v1/receipts", "token-a"); code != http.StatusNotFound {
		t.Errorf("the operator listener serves the API: %d", code)
	}
	for _, tok := range []string{"", "token-a", "token-admin"} {
		for _, p := range pprofPaths[:5] {
			if code, body := get(t, a.handler, p, tok); code != http.StatusNotFound || strings.Contains(body, "goroutine profile:") ||
				strings.Contains(body, "Types of profiles") {
				t.Errorf("API listener: GET %s (token %q) = %d, want 404", p, tok, code)
			}
		}
	}
}

// TestPprofNeedsTheOperatorListener: pprof without metricsAddr is a
// configuration error, not profiling on the API port.
func TestPprofNeedsTheOperatorListener(t *testing.T) {
	cfg := config.Dev()
	cfg.DataDir = t.TempDir()
	cfg.Pprof = true
	if _, err := Build(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil ||
		!strings.Contains(err.Error(), "pprof needs metricsAddr") {
		t.Fatalf("pprof without metricsAddr: %v", err)
	}
}
