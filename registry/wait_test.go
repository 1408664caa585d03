package registry_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
)

// parkings counts, for the test, each time an acquirer goes to sleep
// between attempts (it found the resource held and waits), and signals the
// first on parked.
func parkings(t *testing.T) (parked <-chan struct{}, count *atomic.Int32) {
	ch := make(chan struct{}, 1)
	count = new(atomic.Int32)
	t.Cleanup(registry.SetTestHookParked(func() {
		if count.Add(1) == 1 {
			ch <- struct{}{}
		}
	}))
	return ch, count
}

// awaitParked returns once an acquirer has parked (a hang fails the test
// by its deadline; it is no measure of time).
func awaitParked(t *testing.T, parked <-chan struct{}) {
	t.Helper()
	select {
	case <-parked:
	case <-time.After(20 * time.Second):
		t.Fatal("no acquirer waited for the held resource")
	}
}

func TestWaitingAcquirerGetsTheLeaseWhenTheHolderReleases(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := context.Background()
	parked, _ := parkings(t)
	held := acquire(t, r, "a", params("res/h", "a1"))
	got := make(chan error, 1)
	var next fencegate.Lease
	go func() {
		is, err := r.AcquireWait(ctx, "b", params("res/h", "b1"), time.Minute)
		next = is.Lease
		got <- err
	}()
	awaitParked(t, parked) // it waits for the holder, not after the release
	if _, err := r.Release(ctx, "a", held.Lease.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if next.Owner != "b" || next.FenceToken <= held.Lease.FenceToken {
		t.Fatalf("waiter got %+v", next)
	}
}

func TestWaitingAcquirerGetsTheLeaseWhenTheTTLLapses(t *testing.T) {
	r, c := newRegistry(t)
	parked, _ := parkings(t)
	held := acquire(t, r, "a", params("res/h", "a1"))
	got := make(chan error, 1)
	go func() {
		_, err := r.AcquireWait(context.Background(), "b", params("res/h", "b1"), time.Minute)
		got <- err
	}()
	awaitParked(t, parked)
	c.Advance(31 * time.Second) // past the holder's 30 s TTL on the registry's clock
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if st, _ := r.Status(context.Background(), held.Lease.ID); st.Lease.State != fencegate.StateExpired {
		t.Fatalf("old lease %s", st.Lease.State)
	}
}

func TestWaitEndsWithLeaseHeld(t *testing.T) {
	r, _ := newRegistry(t)
	_, count := parkings(t)
	acquire(t, r, "a", params("res/h", "a1"))
	_, err := r.AcquireWait(context.Background(), "b", params("res/h", "b1"), 30*time.Millisecond)
	if fencegate.ErrorCode(err) != fencegate.CodeLeaseHeld {
		t.Fatalf("want LEASE_HELD, got %v", err)
	}
	if count.Load() == 0 {
		t.Fatal("the acquirer answered LEASE_HELD without waiting")
	}
}
