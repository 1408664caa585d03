package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/domain"
)

// A worker acquires a lease on a resource, writes objects under it (each
// commit is the next segment of the lease's grant) and releases it.
func Example() {
	gw := newExampleGateway() // a gateway at gw.URL(); see examplegateway_test.go
	defer gw.Close()
	ctx := context.Background()

	lease, err := client.New(gw.URL(), "worker-a").AcquireLease(ctx, client.LeaseParams{AcquireParams: client.AcquireParams{
		Resource: "local/reports/2026-07", TTL: 30 * time.Second, OperationID: "report-2026-07"}})
	if err != nil {
		fmt.Println("acquire:", err)
		return
	}
	fmt.Println(lease.State(), "fence", lease.Fence())
	rc, err := lease.Objects("local").Put(ctx, "reports/2026-07/part-1.csv", strings.NewReader("a,b\n"), "text/csv")
	fmt.Println(rc.State, "segment", rc.Segment, err)
	if err := lease.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
	fmt.Println(lease.State())
	// Output:
	// HELD fence 1
	// COMMITTED segment 1 <nil>
	// RELEASED
}

// Segments number a lease's commits 1, 2, 3, ... in commit order; the
// gateway admits only the next one, so a worker never chooses them.
func ExampleLease_Objects_segments() {
	gw := newExampleGateway()
	defer gw.Close()
	ctx := context.Background()
	lease, _ := client.New(gw.URL(), "worker-a").AcquireLease(ctx, client.LeaseParams{AcquireParams: client.AcquireParams{
		Resource: "local/inv/7", TTL: 30 * time.Second, OperationID: "invoice-7"}})
	w := lease.Objects("local")
	for _, part := range []string{"part-1", "part-2", "part-3"} {
		rc, err := w.Put(ctx, "inv/7/"+part, strings.NewReader(part), "text/plain")
		fmt.Println(part, "segment", rc.Segment, err)
	}
	fmt.Println("next", lease.NextSegment())
	// Output:
	// part-1 segment 1 <nil>
	// part-2 segment 2 <nil>
	// part-3 segment 3 <nil>
	// next 4
}

// After MUTATION_UNKNOWN the effect may or may not exist. The writer sends
// nothing new until the receipts of the operation settle the segment: it
// queries them by operation ID first, and when the same effect is sent again
// and its receipt is COMMITTED, the accepted result is reused, not written
// twice.
func ExampleLease_Objects_mutationUnknown() {
	gw := newExampleGateway()
	defer gw.Close()
	ctx := context.Background()
	lease, _ := client.New(gw.URL(), "worker-a").AcquireLease(ctx, client.LeaseParams{AcquireParams: client.AcquireParams{
		Resource: "local/inv/8", TTL: 30 * time.Second, OperationID: "invoice-8"}})
	w := lease.Objects("local")

	gw.LoseNextAnswer()
	_, err := w.Put(ctx, "inv/8/total", strings.NewReader("42"), "text/plain")
	var fe *domain.Error
	if errors.As(err, &fe) {
		fmt.Println(fe.Code, "receipt", fe.ReceiptID)
	}
	// Still unknown: the same write is not sent again.
	_, err = w.Put(ctx, "inv/8/total", strings.NewReader("42"), "text/plain")
	fmt.Println(domain.ErrorCode(err))

	gw.Reconcile() // the reconciler finds the effect: receipt COMMITTED
	rc, err := w.Put(ctx, "inv/8/total", strings.NewReader("42"), "text/plain")
	fmt.Println(rc.ID, rc.State, err, "applied", gw.Applied())
	// Output:
	// MUTATION_UNKNOWN receipt R1
	// MUTATION_UNKNOWN
	// R1 COMMITTED <nil> applied 1
}

// The owner of a lease delegates segments to a downstream worker (a queue
// consumer), which writes with its own credential under the owner's grant.
// Once a new owner's fence is accepted, the delegate is refused STALE_OWNER,
// even for a segment number it never used.
func ExampleLease_Delegate() {
	gw := newExampleGateway()
	defer gw.Close()
	ctx := context.Background()
	params := client.LeaseParams{AcquireParams: client.AcquireParams{Resource: "local/batch/9", TTL: 30 * time.Second, OperationID: "batch-9"}}
	coordinator, _ := client.New(gw.URL(), "coordinator").AcquireLease(ctx, params)
	d, err := coordinator.Delegate(ctx, client.DelegateParams{Delegate: "consumer", SegmentFrom: 1, SegmentTo: 2})
	if err != nil {
		fmt.Println("delegate:", err)
		return
	}
	// The grant and d.Delegation travel with the message to the consumer.
	consumer, _ := client.New(gw.URL(), "consumer").DelegatedWriter(coordinator.Grant(), d.Delegation)
	rc, err := consumer.Put(ctx, "local", "batch/9/item-1", 1, strings.NewReader("1"), "text/plain")
	fmt.Println("delegate segment", rc.Segment, err)

	gw.Lapse() // the coordinator pauses past its TTL; a new one takes over
	next, _ := client.New(gw.URL(), "coordinator-2").AcquireLease(ctx, params)
	rc, _ = next.Objects("local").Put(ctx, "batch/9/item-1", strings.NewReader("1"), "text/plain")
	fmt.Println("new owner fence", next.Fence(), "segment", rc.Segment)

	_, err = consumer.Put(ctx, "local", "batch/9/item-2", 2, strings.NewReader("2"), "text/plain")
	fmt.Println("late delegate:", domain.ErrorCode(err))
	// Output:
	// delegate segment 1 <nil>
	// new owner fence 2 segment 1
	// late delegate: STALE_OWNER
}

// A fenced call of an API the gateway fronts: the upstream's answer (any
// status) comes back with the receipt of the segment it was.
func ExampleLease_API() {
	gw := newExampleGateway()
	defer gw.Close()
	ctx := context.Background()
	lease, _ := client.New(gw.URL(), "worker-a").AcquireLease(ctx, client.LeaseParams{AcquireParams: client.AcquireParams{
		Resource: "payouts/acct-1", TTL: 30 * time.Second, OperationID: "payout-1"}})
	resp, err := lease.API("payouts").Call(ctx, "POST", "/payouts", []byte(`{"amount":100}`), "application/json")
	if err != nil {
		fmt.Println("call:", err)
		return
	}
	fmt.Println(resp.Status, resp.Receipt, strings.TrimSpace(string(resp.Body)))
	// Output:
	// 200 R1 {"id":"po_1","request":"{\"amount\":100}"}
}
