package app

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/config"
)

// Rule: the coordination backend forgets lease records on the configured
// registry.leaseRetention, not its own default: with 2h, a released lease's
// record is gone after an acquisition 2h past its expiry.
func TestTheLeaseBackendUsesTheConfiguredLeaseRetention(t *testing.T) {
	cfg := config.Dev()
	cfg.DataDir = t.TempDir()
	cfg.Registry.LeaseRetention = 2 * time.Hour
	b, err := openLeaseBackend(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, t0 := context.Background(), time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	req := fencegate.AcquireRequest{LeaseID: "l1", Resource: "db/a", Owner: "alice", RequestID: "r1", TTL: time.Second, Now: t0}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(time.Second + 2*time.Hour)
	if _, err := b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: "l2", Resource: "db/b", Owner: "bob", RequestID: "r2", TTL: time.Second, Now: later}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lease(ctx, "l1", later); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("a record past the configured retention: want NOT_FOUND, got %v", err)
	}
}
