package leasetest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// BenchmarkAcquireRelease measures one acquire followed by one release of the
// same resource on backend b.
func BenchmarkAcquireRelease(b *testing.B, backend fencegate.LeaseBackend) {
	ctx := context.Background()
	now := T0
	i := 0
	for b.Loop() {
		i++
		id := strconv.Itoa(i)
		l, err := backend.Acquire(ctx, fencegate.AcquireRequest{
			LeaseID: "bench-" + id, Resource: "bench/hot", Owner: "bench", RequestID: id,
			OperationID: "op", OperationRoot: "sha256:op", TTL: time.Minute, Now: now,
		})
		if err != nil {
			b.Fatalf("acquire: %v", err)
		}
		if _, _, err := backend.Release(ctx, l.ID, l.Owner, now, fencegate.Guard{}); err != nil {
			b.Fatalf("release: %v", err)
		}
	}
}
