package handlers

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencegate/fencegate/internal/logctx"
)

// Observer is told about every answered request, for metrics (problem
// answers by code go to Server.Refused). Its labels are bounded: the chi route pattern (never the path), the method, the status.
type Observer interface {
	// Request is one answered request on route ("" when no route matched).
	Request(route, method string, status int, d time.Duration)
}

type nopObserver struct{}

func (nopObserver) Request(string, string, int, time.Duration) {}

// RequestIDHeader carries a request's ID: taken from the caller when it is
// well formed (logctx.AcceptRequestID), else generated, and always echoed.
const RequestIDHeader = "X-Request-Id"

// observeRequests gives every request an ID (echoed in X-Request-Id, named by
// every log line of the request and every problem answer), a server span
// continuing the caller's W3C traceparent, and reports it to the Observer
// once answered.
func (s *Server) observeRequests(next http.Handler) http.Handler {
	tracer, noopTracing := s.tracer(), isNoop(s.Tracer)
	prop := propagation.TraceContext{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := logctx.AcceptRequestID(r.Header.Get(RequestIDHeader))
		w.Header().Set(RequestIDHeader, id)
		ctx, span := r.Context(), noSpan
		switch {
		case noopTracing:
			// What a noop tracer's Start would leave: the caller's trace
			// context (so log lines still name its trace), no span of ours,
			// and nothing allocated for a request without a traceparent.
			if r.Header.Get("Traceparent") != "" {
				ctx = prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
				span = trace.SpanFromContext(ctx)
			}
		case tracer != nil:
			ctx = prop.Extract(ctx, propagation.HeaderCarrier(r.Header))
			ctx, span = tracer.Start(ctx, "http "+r.Method, trace.WithSpanKind(trace.SpanKindServer),
				trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("fencegate.request_id", id)))
		}
		defer span.End()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		r = r.WithContext(logctx.WithRequest(ctx, id))
		next.ServeHTTP(ww, r)
		route := ""
		if rc := chi.RouteContext(r.Context()); rc != nil {
			route = rc.RoutePattern()
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		if span.IsRecording() {
			span.SetName("http " + r.Method + " " + route)
			span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", status))
		}
		s.observer().Request(route, r.Method, status, time.Since(start))
	})
}

func (s *Server) observer() Observer {
	if s.Observe == nil {
		return nopObserver{}
	}
	return s.Observe
}

// tracer is nil without a TracerProvider or with a noop one: no span is
// started then.
func (s *Server) tracer() trace.Tracer {
	if s.Tracer == nil || isNoop(s.Tracer) {
		return nil
	}
	return s.Tracer.Tracer("github.com/fencegate/fencegate/handlers")
}

// isNoop reports whether tp is OpenTelemetry's noop provider (tracing off),
// whose spans record nothing: starting them would only allocate. gateway.New
// makes the same check for its own tracer (keep the two alike).
func isNoop(tp trace.TracerProvider) bool {
	_, ok := tp.(noop.TracerProvider)
	return ok
}

// noSpan is the non-recording span of a context without one.
var noSpan = trace.SpanFromContext(context.Background())
