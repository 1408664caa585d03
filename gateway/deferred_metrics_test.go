package gateway_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// settledCounter counts the settles a gateway reports.
type settledCounter struct {
	gateway.NopObserver
	n atomic.Int32
}

func (c *settledCounter) Settled(fencegate.ReceiptState) { c.n.Add(1) }

// TestProvenDeferredSettleIsCountedOnce: another replica's read proves an
// answered receipt from its object (and counts that settle); the answering
// process's later flush finds it recorded by that proof and does not count
// it a second time, while a flush that records it itself is counted.
func TestProvenDeferredSettleIsCountedOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	mk := func(obs gateway.Observer) *gateway.Gateway {
		gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now, Observe: obs,
			Policy: gateway.StaticPolicy{Generation: 1}, DeferSettle: time.Millisecond, After: never,
			Resolver: func(string) gateway.Resolver { return f.objects() }})
		if err != nil {
			t.Fatal(err)
		}
		return gw
	}
	var answering, reader settledCounter
	gw, other := mk(&answering), mk(&reader)
	first, err := gw.Apply(ctx, f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	f.kit.Advance(time.Second) // the proof records a later time than the answer
	if got, err := other.Store().Receipt(ctx, first.Receipt.ID); err != nil || got.State != fencegate.ReceiptCommitted {
		t.Fatalf("read through the other replica: %s %v", got.State, err)
	}
	if err := gw.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if a, r := answering.n.Load(), reader.n.Load(); a != 0 || r != 1 {
		t.Fatalf("settles counted: answering %d, reader %d; want 0 and 1", a, r)
	}
	if _, err := gw.Apply(ctx, f.request(5, 2, "v2")); err != nil {
		t.Fatal(err)
	}
	if err := gw.Drain(ctx); err != nil || answering.n.Load() != 1 {
		t.Fatalf("own flush: %v, counted %d, want 1", err, answering.n.Load())
	}
}

// deferredGauge keeps every count of not-yet-durable settles it is told.
type deferredGauge struct {
	gateway.NopObserver
	mu   sync.Mutex
	told []int
}

func (g *deferredGauge) Deferred(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.told = append(g.told, n)
}

// TestDeferredSettlesGaugeFollowsTheEntries: the observer is told the number
// of answered settles not yet durable at every change: up when a write is
// answered before its settle, down when a fold or a drain made it durable.
func TestDeferredSettlesGaugeFollowsTheEntries(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	obs := &deferredGauge{}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: &priorStore{FenceStore: f.store}, Now: f.kit.Now,
		Observe: obs, Policy: gateway.StaticPolicy{Generation: 1}, DeferSettle: time.Millisecond, After: never,
		Resolver: func(string) gateway.Resolver { return f.objects() }})
	if err != nil {
		t.Fatal(err)
	}
	for seg := uint64(1); seg <= 2; seg++ { // the second folds the first
		if _, err := gw.Apply(ctx, f.request(5, seg, "v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := gw.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if want := []int{1, 0, 1, 0}; !slices.Equal(obs.told, want) || gw.DeferredSettles() != 0 {
		t.Fatalf("told %v, want %v", obs.told, want)
	}
}
