package gateway

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencegate/fencegate"
)

// Observer is told how the acceptance point's steps went, for metrics. Every
// label it is given is bounded: an outcome or code, a backend name from the
// configuration ("objects/NAME" or "apis/NAME"), a receipt state, a store
// operation; never a resource, key or caller. Its methods must not block.
type Observer interface {
	// Admission is one admission attempt's result ("admitted", "replay" or
	// the refusal's code) and how long it took, waiting included.
	Admission(outcome string, d time.Duration)
	// Effect is one forwarded effect on backend: the state it left the
	// receipt in, the code of its error ("" for none) and how long it took.
	Effect(backend string, state fencegate.ReceiptState, code fencegate.Code, d time.Duration)
	// Settled is a receipt recorded in a final or UNKNOWN state.
	Settled(state fencegate.ReceiptState)
	// Settle is how long a request waited for its effect's settle to be
	// recorded before it was answered, by the state the gateway recorded
	// (a deferred settle is not on the request's path and is not told).
	Settle(state fencegate.ReceiptState, d time.Duration)
	// StoreError is a fence store fault (no verdict) during op.
	StoreError(op string)
	// FirstWrite is the first accepted write of a new fence on a resource:
	// at is when it was admitted, issuedAt when its grant was issued.
	FirstWrite(resource string, fence uint64, issuedAt, at time.Time)
	// Backlog is what a reconcile pass saw: UNKNOWN receipts, the age of the
	// oldest, and how many of them are overdue (need a person).
	Backlog(unknown int, oldest time.Duration, overdue int)
	// Deferred is the number of this process's answered settles not yet
	// durable (Gateway.DeferredSettles), told at every change of it, in order.
	Deferred(n int)
	// Staged is a write staged beside its admission (stage.go) and how it
	// ended: "used" (handed to the effect, which publishes it), "discarded"
	// (refused, replayed, or admitted as another receipt) or "failed" (the
	// write went on without it).
	Staged(outcome string)
}

// NopObserver observes nothing.
type NopObserver struct{}

// Admission does nothing.
func (NopObserver) Admission(string, time.Duration) {}

// Effect does nothing.
func (NopObserver) Effect(string, fencegate.ReceiptState, fencegate.Code, time.Duration) {}

// Settled does nothing.
func (NopObserver) Settled(fencegate.ReceiptState) {}

// Settle does nothing.
func (NopObserver) Settle(fencegate.ReceiptState, time.Duration) {}

// StoreError does nothing.
func (NopObserver) StoreError(string) {}

// FirstWrite does nothing.
func (NopObserver) FirstWrite(string, uint64, time.Time, time.Time) {}

// Backlog does nothing.
func (NopObserver) Backlog(int, time.Duration, int) {}

// Deferred does nothing.
func (NopObserver) Deferred(int) {}

// Staged does nothing.
func (NopObserver) Staged(string) {}

// BackendOf is the bounded backend label of a receipt target:
// "objects/NAME" or "apis/NAME" (NAME from the configuration), else "other".
// It is a prefix of target (no new string per write).
func BackendOf(target string) string {
	for _, kind := range []string{"objects/", "apis/"} {
		if rest, ok := strings.CutPrefix(target, kind); ok {
			if name, _, ok := strings.Cut(rest, "/"); ok && name != "" {
				return target[:len(kind)+len(name)]
			}
		}
	}
	return "other"
}

// admissionOutcome is the Admission label of an admission's result.
func admissionOutcome(adm fencegate.Admission, err error) string {
	switch {
	case err != nil:
		return string(fencegate.ErrorCode(err))
	case adm.Replay:
		return "replay"
	}
	return "admitted"
}

// endSpan ends span, marking it failed with the error's code when err is set.
func endSpan(span trace.Span, err error) {
	if err != nil {
		code := fencegate.ErrorCode(err)
		span.SetAttributes(attribute.String("fencegate.code", string(code)))
		span.SetStatus(codes.Error, string(code))
	}
	span.End()
}

// noSpan is the non-recording span of a context without one.
var noSpan = trace.SpanFromContext(context.Background())

// startSpan starts a span under ctx's, or, without a tracer, returns ctx and
// a non-recording span without allocating.
func (g *Gateway) startSpan(ctx context.Context, name string) (context.Context, trace.Span) {
	if g.tracer == nil {
		return ctx, noSpan
	}
	return g.tracer.Start(ctx, name)
}
