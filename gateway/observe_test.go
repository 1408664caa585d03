package gateway_test

import (
	"context"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// recorder is a gateway.Observer that keeps what it was told.
type recorder struct {
	mu          sync.Mutex
	admissions  []string
	effects     []string
	settled     []fencegate.ReceiptState
	settles     []fencegate.ReceiptState
	firstWrites []uint64
}

func (r *recorder) Admission(o string, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.admissions = append(r.admissions, o)
}
func (r *recorder) Effect(b string, s fencegate.ReceiptState, _ fencegate.Code, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.effects = append(r.effects, b+" "+string(s))
}
func (r *recorder) Settled(s fencegate.ReceiptState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settled = append(r.settled, s)
}
func (r *recorder) StoreError(string) {}
func (r *recorder) FirstWrite(_ string, fence uint64, _, _ time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.firstWrites = append(r.firstWrites, fence)
}
func (r *recorder) Backlog(int, time.Duration, int) {}
func (r *recorder) Deferred(int)                    {}
func (r *recorder) Staged(string)                   {}
func (r *recorder) Settle(s fencegate.ReceiptState, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settles = append(r.settles, s)
}

// TestAcceptedWriteIsTracedAndObservedStepByStep: an accepted segment makes
// the verify, admit, effect and settle spans (in-memory exporter) and tells
// the observer its admission, effect, settle (and the wait for it) and first
// write; a replay is an
// admission "replay" with no effect, and a stale segment's admission carries
// its refusal code.
func TestAcceptedWriteIsTracedAndObservedStepByStep(t *testing.T) {
	f := newFixture(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	rec := &recorder{}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Observe: rec, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := gw.Apply(ctx, f.request(5, 1, "a")); err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, s := range exp.GetSpans() {
		names[s.Name]++
	}
	for _, n := range []string{"fencegate.verify", "fencegate.admit", "fencegate.effect", "fencegate.settle"} {
		if names[n] == 0 {
			t.Fatalf("no %s span: %v", n, names)
		}
	}
	if _, err := gw.Apply(ctx, f.request(5, 1, "a")); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if _, err := gw.Apply(ctx, f.request(6, 1, "b")); err != nil {
		t.Fatal(err)
	}
	_, err = gw.Apply(ctx, f.request(5, 2, "c"))
	if fencegate.ErrorCode(err) != fencegate.CodeStaleOwner {
		t.Fatalf("stale: %v", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []string{"admitted", "replay", "admitted", "STALE_OWNER"}
	if len(rec.admissions) != len(want) {
		t.Fatalf("admissions %v, want %v", rec.admissions, want)
	}
	for i := range want {
		if rec.admissions[i] != want[i] {
			t.Fatalf("admissions %v, want %v", rec.admissions, want)
		}
	}
	if len(rec.effects) != 2 || rec.effects[0] != "objects/local COMMITTED" {
		t.Fatalf("effects %v", rec.effects)
	}
	if len(rec.settled) != 2 || rec.settled[1] != fencegate.ReceiptCommitted {
		t.Fatalf("settled %v", rec.settled)
	}
	if len(rec.settles) != 2 || rec.settles[0] != fencegate.ReceiptCommitted || rec.settles[1] != fencegate.ReceiptCommitted {
		t.Fatalf("settles the requests waited for: %v, want two COMMITTED", rec.settles)
	}
	if len(rec.firstWrites) != 2 || rec.firstWrites[0] != 5 || rec.firstWrites[1] != 6 {
		t.Fatalf("first writes %v, want [5 6]", rec.firstWrites)
	}
	var stale bool
	for _, s := range exp.GetSpans() {
		if s.Name == "fencegate.admit" && s.Status.Description == "STALE_OWNER" {
			stale = true
		}
	}
	if !stale {
		t.Fatal("the refused admission's span does not carry STALE_OWNER")
	}
}

// TestBackendOfNamesOnlyTheConfiguredBackend: the effect label is the
// backend's configured name, never the key.
func TestBackendOfNamesOnlyTheConfiguredBackend(t *testing.T) {
	for target, want := range map[string]string{
		"objects/s3a/inv/7": "objects/s3a", "apis/payouts/v1/payouts": "apis/payouts", "objects/": "other", "x": "other",
	} {
		if got := gateway.BackendOf(target); got != want {
			t.Errorf("BackendOf(%q) = %q, want %q", target, got, want)
		}
	}
}
