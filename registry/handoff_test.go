package registry_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/registry/embedded"
)

type handoffRecorder struct{ ended, granted []time.Time }

func (h *handoffRecorder) Handoff(_ string, _ uint64, ended, granted time.Time) {
	h.ended, h.granted = append(h.ended, ended), append(h.granted, granted)
}

// lengths are the handoffs recorded, each from end to grant.
func (h *handoffRecorder) lengths() []time.Duration {
	out := make([]time.Duration, len(h.ended))
	for i := range h.ended {
		out[i] = h.granted[i].Sub(h.ended[i])
	}
	return out
}

// handoffRegistry is a registry on an embedded backend and the clock c that
// tells rec of its handoffs; its lease IDs are lease-1, lease-2, ...
func handoffRegistry(t *testing.T, c *clock, rec *handoffRecorder) *registry.Registry {
	t.Helper()
	b, err := embedded.Open(filepath.Join(t.TempDir(), "registry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	n := 0
	r, err := registry.New(registry.Config{Backend: b, Signer: jsonSigner{}, Now: c.Now, Handoff: rec,
		NewID: func() string { n++; return fmt.Sprintf("lease-%d", n) }, IssuerEpoch: 1, PolicyGeneration: 1})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReleaseThenAcquireIsOneHandoffFromTheReleaseOnTheRegistryClock: the
// handoff observed runs from the release to the next grant (registry clock);
// a first acquisition, and the same acquisition asked again, are none.
func TestReleaseThenAcquireIsOneHandoffFromTheReleaseOnTheRegistryClock(t *testing.T) {
	c := &clock{now: t0}
	rec := &handoffRecorder{}
	r := handoffRegistry(t, c, rec)
	first := acquire(t, r, "a", params("res/1", "r-a"))
	if len(rec.ended) != 0 {
		t.Fatalf("a first acquisition is a handoff: %v", rec.ended)
	}
	c.Advance(time.Second)
	if _, err := r.Release(context.Background(), "a", first.Lease.ID); err != nil {
		t.Fatal(err)
	}
	released := c.Now()
	c.Advance(2 * time.Second)
	acquire(t, r, "b", params("res/1", "r-b"))
	acquire(t, r, "b", params("res/1", "r-b")) // the same request again
	if len(rec.ended) != 1 || !rec.ended[0].Equal(released) || rec.granted[0].Sub(rec.ended[0]) != 2*time.Second {
		t.Fatalf("handoffs ended %v granted %v; want one from %v, 2s long", rec.ended, rec.granted, released)
	}
}

// TestARetriedReleaseStartsNoHandoff: only the release that ended a lease
// starts a handoff; a retry of it (its answer lost), finding the lease
// released already, does not, or the next grant on the resource would be
// measured from the retry. A releases, B acquires 10ms later; A's release
// is retried 1s later; B's lease lapses unreleased and C acquires 10ms
// after: one 10ms handoff, not also one of about 29s from the retry.
func TestARetriedReleaseStartsNoHandoff(t *testing.T) {
	ctx := context.Background()
	c := &clock{now: t0}
	rec := &handoffRecorder{}
	r := handoffRegistry(t, c, rec)
	a := acquire(t, r, "a", params("res/1", "r-a"))
	c.Advance(time.Second)
	if _, err := r.Release(ctx, "a", a.Lease.ID); err != nil {
		t.Fatal(err)
	}
	c.Advance(10 * time.Millisecond)
	b := acquire(t, r, "b", params("res/1", "r-b"))
	c.Advance(time.Second)
	if _, err := r.Release(ctx, "a", a.Lease.ID); err != nil { // the retry
		t.Fatal(err)
	}
	c.Advance(b.Lease.ExpiresAt.Sub(c.Now()) + 10*time.Millisecond)
	acquire(t, r, "c", params("res/1", "r-c"))
	if got := rec.lengths(); len(got) != 1 || got[0] != 10*time.Millisecond {
		t.Fatalf("handoffs %v; want exactly one of 10ms (A's release -> B)", got)
	}
}

// TestARepeatedAcquireKeepsTheHandoffForTheNextGrant: an acquisition asked
// again (same owner and request ID) is answered with its first lease and
// grants nothing, so it does not use up the end of the last lease: the next
// new lease is still measured from it. A releases; A's acquisition is
// repeated; B acquires 10ms after the release: one 10ms handoff.
func TestARepeatedAcquireKeepsTheHandoffForTheNextGrant(t *testing.T) {
	c := &clock{now: t0}
	rec := &handoffRecorder{}
	r := handoffRegistry(t, c, rec)
	a := acquire(t, r, "a", params("res/1", "r-a"))
	c.Advance(time.Second)
	if _, err := r.Release(context.Background(), "a", a.Lease.ID); err != nil {
		t.Fatal(err)
	}
	c.Advance(5 * time.Millisecond)
	if again := acquire(t, r, "a", params("res/1", "r-a")); again.Lease.ID != a.Lease.ID {
		t.Fatalf("the repeated acquisition got lease %s, not %s", again.Lease.ID, a.Lease.ID)
	}
	c.Advance(5 * time.Millisecond)
	acquire(t, r, "b", params("res/1", "r-b"))
	if got := rec.lengths(); len(got) != 1 || got[0] != 10*time.Millisecond {
		t.Fatalf("handoffs %v; want exactly one of 10ms (A's release -> B)", got)
	}
}
