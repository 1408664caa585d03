package registry_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
)

// awaitParked returns once an acquirer of r sleeps between attempts: it
// found the resource held and waits (not a timing bound: a hang fails the
// test by its deadline).
func awaitParked(t *testing.T, r *registry.Registry) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; runtime.Gosched() {
		if now, _ := registry.Parked(r); now > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no acquirer waited for the held resource")
		}
	}
}

func TestWaitingAcquirerGetsTheLeaseWhenTheHolderReleases(t *testing.T) {
	r, _ := newRegistry(t)
	ctx := context.Background()
	held := acquire(t, r, "a", params("res/h", "a1"))
	got := make(chan error, 1)
	var next fencegate.Lease
	go func() {
		is, err := r.AcquireWait(ctx, "b", params("res/h", "b1"), time.Minute)
		next = is.Lease
		got <- err
	}()
	awaitParked(t, r) // it waits for the holder, not after the release
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
	held := acquire(t, r, "a", params("res/h", "a1"))
	got := make(chan error, 1)
	go func() {
		_, err := r.AcquireWait(context.Background(), "b", params("res/h", "b1"), time.Minute)
		got <- err
	}()
	awaitParked(t, r)
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
	acquire(t, r, "a", params("res/h", "a1"))
	_, err := r.AcquireWait(context.Background(), "b", params("res/h", "b1"), 30*time.Millisecond)
	if fencegate.ErrorCode(err) != fencegate.CodeLeaseHeld {
		t.Fatalf("want LEASE_HELD, got %v", err)
	}
	if now, ever := registry.Parked(r); ever == 0 || now != 0 {
		t.Fatalf("the acquirer answered LEASE_HELD without waiting (parked %d times, %d still)", ever, now)
	}
}
