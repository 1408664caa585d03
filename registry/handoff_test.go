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

// TestReleaseThenAcquireIsOneHandoffFromTheReleaseOnTheRegistryClock: the
// handoff observed runs from the release to the next grant (registry clock);
// a first acquisition, and the same acquisition asked again, are none.
func TestReleaseThenAcquireIsOneHandoffFromTheReleaseOnTheRegistryClock(t *testing.T) {
	b, err := embedded.Open(filepath.Join(t.TempDir(), "registry.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	c := &clock{now: t0}
	n := 0
	rec := &handoffRecorder{}
	r, err := registry.New(registry.Config{Backend: b, Signer: jsonSigner{}, Now: c.Now, Handoff: rec,
		NewID: func() string { n++; return fmt.Sprintf("lease-%d", n) }, IssuerEpoch: 1, PolicyGeneration: 1})
	if err != nil {
		t.Fatal(err)
	}
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
