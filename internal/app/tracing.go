package app

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencegate/fencegate/config"
)

// openTracing returns the tracer provider of cfg: none (noop) unless an OTLP
// endpoint is configured, else batches spans to the collector over
// OTLP/HTTP (the exporter also honours the standard OTEL_EXPORTER_OTLP_*
// variables for headers and TLS; the endpoint is the configured one). The
// returned close flushes what is buffered, for up to 5 s.
func openTracing(cfg config.Tracing) (trace.TracerProvider, func() error, error) {
	if !cfg.Enabled() {
		return noop.NewTracerProvider(), func() error { return nil }, nil
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(strings.TrimRight(cfg.Endpoint, "/")+"/v1/traces"))
	if err != nil {
		return nil, nil, err
	}
	name := cfg.ServiceName
	if name == "" {
		name = "fencegate"
	}
	ratio := cfg.SampleRatio
	if ratio == 0 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(name))))
	return tp, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return tp.Shutdown(ctx)
	}, nil
}
