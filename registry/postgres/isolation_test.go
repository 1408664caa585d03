package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/registry/leasetest"
	"github.com/fencegate/fencegate/registry/postgres"
)

// Rule: the backend runs READ COMMITTED whatever the server's or role's
// default isolation. Under a serializable default, concurrent acquires of
// two resources were BACKEND_CONFLICT (40001) instead of one winner per
// resource and LEASE_HELD for the others.
func TestAcquiresQueueUnderAStricterDefaultIsolation(t *testing.T) {
	b := open(t, testenv.WithParam(t, testenv.PostgresURL(t), "default_transaction_isolation", "serializable"))
	defer b.Close()
	ctx := context.Background()
	const workers = 8
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			_, errs[i] = b.Acquire(ctx, fencegate.AcquireRequest{LeaseID: fmt.Sprint("l", i),
				Resource: fmt.Sprint("db/", i%2), Owner: fmt.Sprint("o", i), RequestID: fmt.Sprint("r", i),
				TTL: time.Minute, Now: leasetest.T0})
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch fencegate.ErrorCode(err) {
		case "":
			won++
		case fencegate.CodeLeaseHeld:
		default:
			t.Errorf("acquire %d (resource db/%d): %v", i, i%2, err)
		}
	}
	if won != 2 {
		t.Errorf("%d acquires won, want one per resource (2)", won)
	}
}

// Rule: the backend refuses to start where commits are not durable
// (synchronous_commit off): an acquisition it answered could be lost in a
// crash and its fence issued again.
func TestOpenRefusesSynchronousCommitOff(t *testing.T) {
	dsn := testenv.WithParam(t, testenv.PostgresURL(t), "synchronous_commit", "off")
	b, err := postgres.Open(context.Background(), dsn)
	if err == nil {
		b.Close()
		t.Fatal("Open accepted a server with synchronous_commit off")
	}
	if fencegate.ErrorCode(err) != fencegate.CodeUnsupported {
		t.Fatalf("Open: %v, want UNSUPPORTED", err)
	}
	if n := testenv.SchemaTables(t, dsn); n != 0 {
		t.Fatalf("the refused Open left %d tables: it migrated before it checked", n)
	}
}
