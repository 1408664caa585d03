package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// TestAWriteThatGivesUpWaitingForTheResourceIsBusyAndChangesNothing: a write
// whose context ends while another write of the resource holds this
// process's lock (through its effect) is RESOURCE_BUSY, and neither its
// segment nor its body is admitted or written (a rejection changes no state).
func TestAWriteThatGivesUpWaitingForTheResourceIsBusyAndChangesNothing(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	entered, release := make(chan struct{}), make(chan struct{})
	f.obj.set(func(ctx context.Context, req fencegate.PutRequest) (string, error) {
		close(entered)
		<-release
		return f.obj.ObjectStore.Put(ctx, req)
	}, nil)
	first := make(chan error, 1)
	go func() {
		_, err := f.gw.Apply(ctx, f.request(5, 1, "v1"))
		first <- err
	}()
	<-entered // the first write holds the resource, in its effect

	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err := f.gw.Apply(gone, f.request(5, 2, "v2"))
	if fencegate.ErrorCode(err) != fencegate.CodeResourceBusy || !strings.Contains(err.Error(), "gave up waiting for the resource") {
		t.Fatalf("a write that gave up waiting = %v; want RESOURCE_BUSY (gave up waiting for the resource)", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first write: %v", err)
	}
	rs, err := f.store.Resource(ctx, resource)
	if err != nil || rs.LastSegmentSeq != 1 || rs.PendingReceipt != "" {
		t.Fatalf("resource after the refused write = %+v, %v; want segment 1 settled", rs, err)
	}
	if got := f.content(); got != "v1" {
		t.Fatalf("object = %q after the refused write, want v1", got)
	}
}

// settlesOnBusy is a fence store on which the busy receipt of the first
// RESOURCE_BUSY is settled right after that answer (another replica's
// settle landing between this replica's admission and its look at the
// receipt).
type settlesOnBusy struct {
	fencegate.FenceStore
	onBusy func()
}

func (s *settlesOnBusy) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	adm, err := s.FenceStore.Admit(ctx, req)
	if fencegate.ErrorCode(err) == fencegate.CodeResourceBusy && s.onBusy != nil {
		s.onBusy()
		s.onBusy = nil
	}
	return adm, err
}

// Rule: a write that met RESOURCE_BUSY and finds the busy receipt settled
// since tries again (the resource is free), rather than answering
// RESOURCE_BUSY; the new owner's write is admitted and applied.
func TestABusyReceiptSettledMeanwhileLetsTheWaitingWriteIn(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, vg := f.kit.VerifiedGrant(func(g *fencegate.Grant) {
		g.Resource, g.FenceToken, g.Lease, g.OperationRoot = resource, 5, "lease-5", "root-5"
	})
	adm, err := f.store.Admit(ctx, fencegate.AdmitRequest{Grant: vg, Segment: 1, Target: fencegate.ObjectTarget("local", key),
		Method: "PUT", PayloadDigest: "sha256:a", ReceiptID: "rcpt_other_replica", Now: f.kit.Now()})
	if err != nil {
		t.Fatal(err)
	}
	st := &settlesOnBusy{FenceStore: f.store, onBusy: func() {
		if _, err := f.store.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptFailed, Now: f.kit.Now()}); err != nil {
			t.Error(err)
		}
	}}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now, After: atOnce,
		Policy: gateway.StaticPolicy{Generation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := gw.Apply(ctx, f.request(6, 1, "v6"))
	if err != nil || res.Receipt.State != fencegate.ReceiptCommitted {
		t.Fatalf("the write after the busy receipt settled: %+v %v, want COMMITTED", res.Receipt, err)
	}
	if got := f.content(); got != "v6" {
		t.Fatalf("object = %q, want v6", got)
	}
}
