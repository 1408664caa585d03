package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencegate/fencegate/internal/logctx"
)

// TestRegistryQueryCarriesTheRequestIDAndTrace: a status query a gateway
// makes for a request names that request (X-Request-Id) and continues its
// trace (traceparent), so the registry's lines and spans join the gateway's.
func TestRegistryQueryCarriesTheRequestIDAndTrace(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	q, err := newRemoteQuerier(srv.URL, "gw-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(logctx.WithRequest(context.Background(), "req-42"), "write")
	defer span.End()
	_, _ = q.askProof(ctx, "/v1/leases/l-1/attest", map[string]string{})
	if got.Get("X-Request-Id") != "req-42" {
		t.Errorf("X-Request-Id %q", got.Get("X-Request-Id"))
	}
	if tp := got.Get("traceparent"); len(tp) != 55 || tp[3:35] != span.SpanContext().TraceID().String() {
		t.Errorf("traceparent %q, want trace %s", tp, span.SpanContext().TraceID())
	}
}
