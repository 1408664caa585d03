package handlers_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencegate/fencegate"
	fgclient "github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/fencestore/memory"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/internal/logctx"
	"github.com/fencegate/fencegate/internal/metrics"
	"github.com/fencegate/fencegate/internal/spool"
	"github.com/fencegate/fencegate/proofs/prooftest"
	"github.com/fencegate/fencegate/registry"
	regembedded "github.com/fencegate/fencegate/registry/embedded"
)

// nopObjects is an object store whose Put does nothing: what is left of a
// write's cost is the gateway's own.
type nopObjects struct{}

func (nopObjects) Name() string { return "local" }
func (nopObjects) Put(context.Context, fencegate.PutRequest) (string, error) {
	return `"etag"`, nil
}
func (nopObjects) Delete(context.Context, string, string) error { return nil }
func (nopObjects) Get(context.Context, string) (io.ReadCloser, fencegate.ObjectInfo, error) {
	return nil, fencegate.ObjectInfo{}, fencegate.Errorf(fencegate.CodeNotFound, "none")
}
func (nopObjects) Head(context.Context, string) (fencegate.ObjectInfo, error) {
	return fencegate.ObjectInfo{}, fencegate.Errorf(fencegate.CodeNotFound, "none")
}

// writePath is the write path wired as internal/app wires `gateway dev`
// (metrics observers, tracing off through a noop provider, a logctx logger
// at INFO, one body pool, a registry for leases) over a memory fence store
// and nopObjects.
func writePath(b *testing.B) (http.Handler, *prooftest.Kit, *registry.Registry) {
	b.Helper()
	kit := prooftest.New(b)
	m := metrics.New()
	log, err := logctx.NewLogger(io.Discard, "text", "info")
	if err != nil {
		b.Fatal(err)
	}
	tp := noop.NewTracerProvider()
	gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: memory.New(), Now: kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Log: log, Alarm: m, Observe: m, Tracer: tp})
	if err != nil {
		b.Fatal(err)
	}
	bk, err := regembedded.Open(filepath.Join(b.TempDir(), "registry.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bk.Close() })
	reg, err := registry.New(registry.Config{Backend: bk, Signer: kit.Signer(), IssuerEpoch: kit.Epoch(),
		PolicyGeneration: 1, Now: kit.Now})
	if err != nil {
		b.Fatal(err)
	}
	srv := &handlers.Server{
		Gateway: gw, Stores: map[string]fencegate.ObjectStore{"local": nopObjects{}},
		Auth:     handlers.NewBearerTokens(map[string]string{tokA: ownerA}),
		Registry: reg, SpoolDir: b.TempDir(), Log: log, Refused: m.Refused, Observe: m, Tracer: tp,
		Bodies: spool.NewPool(handlers.DefaultMemoryBody, handlers.DefaultMemoryBodies),
	}
	return handlers.Router(srv), kit, reg
}

var benchBody = bytes.Repeat([]byte("0123456789abcdef"), 64) // 1 KiB, as loadbench writes

// BenchmarkWritePath is one fenced 1 KiB PUT /v1/objects under one grant,
// segments 1, 2, 3 ...:
//   - handler: the router's ServeHTTP in process (no sockets), the request
//     built per op as net/http would (its allocations are counted);
//   - loopback: the project's client (Lease.Objects().Put, as loadbench
//     writes) against the same handler behind net/http on loopback, both
//     sides in this process: client and server CPU together;
//   - loopback-c32: loopback with 32 goroutines sharing one Client.
//
// go test -run X -bench WritePath -benchmem ./handlers/
func BenchmarkWritePath(b *testing.B) {
	b.Run("handler", func(b *testing.B) {
		h, kit, _ := writePath(b)
		tok, vg := kit.VerifiedGrant(func(g *fencegate.Grant) { g.Resource, g.Owner = "local/bench/0", ownerA })
		status := kit.Status(vg, nil)
		var w discardWriter
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			r, _ := http.NewRequest("PUT", "http://gw/v1/objects/local/bench/0", bytes.NewReader(benchBody))
			r.ContentLength = int64(len(benchBody))
			r.RemoteAddr = "127.0.0.1:1234"
			r.Header = http.Header{
				"Authorization": {"Bearer " + tokA}, "Fence-Grant": {tok}, "Fence-Status": {status},
				"Fence-Segment": {strconv.Itoa(i + 1)}, "Content-Type": {"application/octet-stream"},
				"Accept": {"application/json, application/problem+json, */*"},
			}
			w.reset()
			h.ServeHTTP(&w, r)
			if w.status != http.StatusOK {
				b.Fatalf("status %d: %s", w.status, w.body.String())
			}
		}
	})
	b.Run("loopback", func(b *testing.B) {
		h, kit, _ := writePath(b)
		ts := httptest.NewServer(h)
		b.Cleanup(ts.Close)
		cl := fgclient.New(ts.URL, tokA, fgclient.WithClock(kit.Now))
		ctx := context.Background()
		l, err := cl.AcquireLease(ctx, fgclient.LeaseParams{AcquireParams: fgclient.AcquireParams{
			Resource: "local/bench/0", RequestID: "req-0", TTL: time.Hour, OperationID: "op-0"}})
		if err != nil {
			b.Fatal(err)
		}
		wr := l.Objects("local")
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := wr.Put(ctx, "bench/0", bytes.NewReader(benchBody), "application/octet-stream"); err != nil {
				b.Fatal(err)
			}
		}
	})
	// loopback-c32: the same, 32 goroutines (each its own lease and
	// resource) sharing one Client, as loadbench's c=32 point.
	b.Run("loopback-c32", func(b *testing.B) {
		h, kit, _ := writePath(b)
		ts := httptest.NewServer(h)
		b.Cleanup(ts.Close)
		cl := fgclient.New(ts.URL, tokA, fgclient.WithClock(kit.Now))
		ctx := context.Background()
		var next atomic.Int64
		b.SetParallelism(16) // 32 goroutines on 2 cores
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			w := next.Add(1)
			res := "local/bench/p" + strconv.FormatInt(w, 10)
			l, err := cl.AcquireLease(ctx, fgclient.LeaseParams{AcquireParams: fgclient.AcquireParams{
				Resource: res, RequestID: "req-" + res, TTL: time.Hour, OperationID: "op-" + res}})
			if err != nil {
				b.Error(err)
				return
			}
			wr := l.Objects("local")
			for pb.Next() {
				if _, err := wr.Put(ctx, res[len("local/"):], bytes.NewReader(benchBody), "application/octet-stream"); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// discardWriter is a reusable http.ResponseWriter that keeps the status
// and the body (to report a failure).
type discardWriter struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (d *discardWriter) reset() {
	clear(d.h)
	if d.h == nil {
		d.h = http.Header{}
	}
	d.status = 0
	d.body.Reset()
}
func (d *discardWriter) Header() http.Header { return d.h }
func (d *discardWriter) WriteHeader(s int) {
	if d.status == 0 {
		d.status = s
	}
}
func (d *discardWriter) Write(p []byte) (int, error) {
	d.WriteHeader(http.StatusOK)
	return d.body.Write(p)
}
