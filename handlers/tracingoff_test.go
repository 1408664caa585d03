package handlers_test

import (
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/internal/logctx"
)

// TestTracingOffStillNamesTheCallersTrace: with the noop provider the binary
// uses when tracing is off, no span is started, but a caller's traceparent
// still reaches the log lines of its request (as the noop tracer's Start
// left it), and a request without one names no trace.
func TestTracingOffStillNamesTheCallersTrace(t *testing.T) {
	var logs lockedBuffer
	e := newEnvWith(t, func(s *handlers.Server) {
		log, err := logctx.NewLogger(&logs, "json", "debug")
		if err != nil {
			t.Fatal(err)
		}
		s.Log, s.Tracer = log, noop.NewTracerProvider()
	})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	c := e.grant("local/inv", ownerA, 3, nil)
	if r := e.do("PUT", "/v1/objects/local/inv/1", tokA, map[string]string{"Fence-Grant": c.grant, "Fence-Status": c.status,
		"Fence-Segment": "1", "traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}, "x"); r.status != http.StatusOK {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	e.do("GET", "/v1/receipts/nope", "", map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"}, "")
	if !strings.Contains(logs.String(), `"traceId":"`+traceID+`"`) {
		t.Fatalf("log lines do not name the caller's trace: %s", logs.String())
	}
	before, lines := strings.Count(logs.String(), "traceId"), strings.Count(logs.String(), "\n")
	e.do("GET", "/v1/receipts/nope", tokB, nil, "")
	if strings.Count(logs.String(), "\n") == lines || strings.Count(logs.String(), "traceId") != before {
		t.Fatalf("a request without a traceparent names a trace: %s", logs.String())
	}
}
