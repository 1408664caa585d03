package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

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
}
