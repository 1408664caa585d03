package client

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/domain"
)

// Rule: a worker that asks again for its lease under its own request ID
// after a restart goes on after the segments the lease already committed:
// the first commit reads the operation's receipts. An ObjectWriter used to
// start at segment 1 and met QUARANTINED at 1, 2 and 3 (each kept as a
// quarantine record) before a write landed.
func TestARestartedWorkerGoesOnAfterItsLeasesSegments(t *testing.T) {
	f, c := newFake(t)
	for i := 1; i <= 3; i++ {
		f.receipts = append(f.receipts, domain.Receipt{ID: fmt.Sprint("old", i), Lease: "L1", FenceToken: 7, Segment: uint64(i),
			OperationID: "op-1", State: domain.ReceiptCommitted, Method: "PUT", Target: fmt.Sprint("objects/bucket/part-", i)})
	}
	f.writes = make([]http.Header, 3) // the earlier process's writes
	l, err := c.AcquireLease(context.Background(), LeaseParams{AcquireParams: AcquireParams{Resource: "bucket/jobs",
		RequestID: "r-1", TTL: time.Minute, OperationID: "op-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Objects("bucket").Put(context.Background(), "part-4", strings.NewReader("new"), ""); err != nil {
		t.Fatal(err)
	}
	if got := writeSegments(f); got[len(got)-1] != "4" {
		t.Fatalf("the restarted worker's first write went at segment %s, want 4", got[len(got)-1])
	}
}

// A lease acquired under a generated request ID is one nobody wrote under:
// its first write reads no receipts.
func TestAFreshLeasesFirstWriteReadsNoReceipts(t *testing.T) {
	f, l := held(t)
	if _, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), ""); err != nil {
		t.Fatal(err)
	}
	if n := f.count("receipts"); n != 0 {
		t.Fatalf("a fresh lease's first write listed receipts %d times", n)
	}
}

// The same rule for a delegation minted before the restarted worker's first
// write: segments the lease committed before the restart are its own.
func TestARestartedWorkerDelegatesOnlyAfterItsLeasesSegments(t *testing.T) {
	f, c := newFake(t)
	for i := 1; i <= 2; i++ {
		f.receipts = append(f.receipts, domain.Receipt{ID: fmt.Sprint("old", i), Lease: "L1", FenceToken: 7, Segment: uint64(i),
			OperationID: "op-1", State: domain.ReceiptCommitted, Method: "PUT", Target: fmt.Sprint("objects/bucket/part-", i)})
	}
	l, err := c.AcquireLease(context.Background(), LeaseParams{AcquireParams: AcquireParams{Resource: "bucket/jobs",
		RequestID: "r-1", TTL: time.Minute, OperationID: "op-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Delegate(context.Background(), DelegateParams{Delegate: "consumer", SegmentFrom: 1, SegmentTo: 3}); domain.ErrorCode(err) != domain.CodeInvalidRequest {
		t.Fatalf("a delegation of segments the lease committed before its restart: %v, want INVALID_REQUEST", err)
	}
	if f.count("delegate") != 0 {
		t.Fatal("a delegation was minted")
	}
	if _, err := l.Delegate(context.Background(), DelegateParams{Delegate: "consumer", SegmentFrom: 3, SegmentTo: 4}); err != nil {
		t.Fatalf("a delegation after them: %v", err)
	}
}

// A restarted worker's lease whose last segment is still unsettled answers
// MUTATION_UNKNOWN at its first write from the one listing it read, sending
// nothing (the listing is not read twice).
func TestARestartedWorkersUnsettledSegmentIsReadOnce(t *testing.T) {
	f, c := newFake(t)
	f.receipts = append(f.receipts, domain.Receipt{ID: "old1", Lease: "L1", FenceToken: 7, Segment: 1,
		OperationID: "op-1", State: domain.ReceiptUnknown, Method: "PUT", Target: "objects/bucket/part-1"})
	l, err := c.AcquireLease(context.Background(), LeaseParams{AcquireParams: AcquireParams{Resource: "bucket/jobs",
		RequestID: "r-1", TTL: time.Minute, OperationID: "op-1"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Objects("bucket").Put(context.Background(), "part-2", strings.NewReader("new"), "")
	if domain.ErrorCode(err) != domain.CodeMutationUnknown {
		t.Fatalf("a write behind the restart's unsettled segment: %v, want MUTATION_UNKNOWN", err)
	}
	if n, w := f.count("receipts"), f.count("write"); n != 1 || w != 0 {
		t.Fatalf("%d receipt listings and %d writes, want 1 and 0", n, w)
	}
}
