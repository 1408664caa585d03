package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
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
