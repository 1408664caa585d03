// Package logctx carries what a request's log lines must name: its request
// ID and the facts learnt while it is served (caller, resource, fence,
// segment), in a bag on the request's context. A Handler adds the bag, and
// the trace and span IDs of the context's span, to every record logged with
// that context, so each line of a request names it without every call site
// repeating the attributes.
//
// Guarantees: a bag only ever holds what Add was given (callers pass no
// secrets: never a token); a key added twice keeps its latest value, once;
// records logged without a bag pass through unchanged.
package logctx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

type bagKey struct{}

type bag struct {
	mu        sync.Mutex
	requestID string
	// attrs in the order their keys were first added, each key once; a
	// request adds a handful, so a scan beats a map and inline is one
	// allocation for the whole bag.
	attrs  []slog.Attr
	inline [8]slog.Attr
}

// WithRequest returns ctx with a new bag for the request requestID.
func WithRequest(ctx context.Context, requestID string) context.Context {
	b := &bag{requestID: requestID}
	b.attrs = b.inline[:0]
	return context.WithValue(ctx, bagKey{}, b)
}

// RequestID is the request ID of ctx's bag, "" without one.
func RequestID(ctx context.Context) string {
	if b, ok := ctx.Value(bagKey{}).(*bag); ok {
		return b.requestID
	}
	return ""
}

// Add records attrs in ctx's bag; without a bag it does nothing. It takes
// slog.Attr (slog.String, slog.Uint64 ...), not key/value pairs of any, so
// that recording a request's facts allocates nothing. Never pass a credential
// or token.
func Add(ctx context.Context, attrs ...slog.Attr) {
	b, ok := ctx.Value(bagKey{}).(*bag)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
next:
	for _, a := range attrs {
		for j := range b.attrs {
			if b.attrs[j].Key == a.Key {
				b.attrs[j].Value = a.Value
				continue next
			}
		}
		b.attrs = append(b.attrs, a)
	}
}

// attrs returns ctx's request ID and bag as attributes.
func attrs(ctx context.Context) []slog.Attr {
	var out []slog.Attr
	if b, ok := ctx.Value(bagKey{}).(*bag); ok {
		b.mu.Lock()
		out = make([]slog.Attr, 0, 1+len(b.attrs)+2)
		out = append(out, slog.String("requestId", b.requestID))
		out = append(out, b.attrs...)
		b.mu.Unlock()
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		out = append(out, slog.String("traceId", sc.TraceID().String()), slog.String("spanId", sc.SpanID().String()))
	}
	return out
}

// Handler adds ctx's request attributes to every record it handles.
type Handler struct{ slog.Handler }

// Handle adds the attributes of ctx and passes the record on.
// A key the record itself carries is not added again.
func (h Handler) Handle(ctx context.Context, r slog.Record) error {
	if a := attrs(ctx); len(a) > 0 {
		own := map[string]bool{}
		r.Attrs(func(at slog.Attr) bool { own[at.Key] = true; return true })
		r = r.Clone()
		for _, at := range a {
			if !own[at.Key] {
				r.AddAttrs(at)
			}
		}
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the wrapping.
func (h Handler) WithAttrs(as []slog.Attr) slog.Handler { return Handler{h.Handler.WithAttrs(as)} }

// WithGroup keeps the wrapping.
func (h Handler) WithGroup(name string) slog.Handler { return Handler{h.Handler.WithGroup(name)} }

// NewLogger returns a logger writing to w in format ("json" or "text") at
// level ("debug", "info", "warn", "error"), wrapped by Handler.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "json":
		return slog.New(Handler{slog.NewJSONHandler(w, opts)}), nil
	case "text", "":
		return slog.New(Handler{slog.NewTextHandler(w, opts)}), nil
	}
	return nil, fmt.Errorf("log format %q: want json or text", format)
}

// maxRequestID bounds an accepted X-Request-Id.
const maxRequestID = 128

// AcceptRequestID returns the caller's request ID if it is 1 to 128
// characters of letters, digits and "-_.:/=+@", else a new random one: an
// ID that could forge log fields or headers is never echoed.
func AcceptRequestID(given string) string {
	if len(given) > 0 && len(given) <= maxRequestID && strings.Trim(given,
		"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/=+@") == "" {
		return given
	}
	return NewRequestID()
}

// NewRequestID returns "req_" and 24 random hex characters.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	var out [4 + 2*len(b)]byte
	copy(out[:], "req_")
	hex.Encode(out[4:], b[:])
	return string(out[:])
}
