package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/config"
)

// TestTracingIsOffByDefaultAndExportsOverOTLPHTTPWhenConfigured: without an
// endpoint spans are not recorded; with one, a span reaches the collector's
// /v1/traces as OTLP protobuf when the provider is closed.
func TestTracingIsOffByDefaultAndExportsOverOTLPHTTPWhenConfigured(t *testing.T) {
	tp, closeTP, err := openTracing(config.Tracing{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(context.Background(), "off")
	if span.IsRecording() {
		t.Fatal("a span is recorded with tracing off")
	}
	span.End()
	_ = closeTP()

	var posts atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" {
			posts.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	// The endpoint as written, with or without a trailing slash (spans went
	// to //v1/traces, which a collector redirects as a GET without them).
	for _, endpoint := range []string{collector.URL, collector.URL + "/"} {
		posts.Store(0)
		tp, closeTP, err = openTracing(config.Tracing{Endpoint: endpoint})
		if err != nil {
			t.Fatal(err)
		}
		_, span = tp.Tracer("t").Start(context.Background(), "on")
		if !span.IsRecording() {
			t.Fatal("span not recorded with tracing on")
		}
		span.End()
		if err := closeTP(); err != nil {
			t.Fatal(err)
		}
		if posts.Load() == 0 {
			t.Fatalf("no OTLP export to %s reached the collector's /v1/traces", endpoint)
		}
	}
}
