package gateway_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// Rule: shadow mode never forwards a refused request beside a fenced effect
// in flight on its target, also when that effect's grant is for a covering
// resource (local/inv for local/inv/7), whose row carries the pending mark:
// the forward is RESOURCE_BUSY (its verdict still counted) and the fenced
// write commits.
func TestShadowForwardWaitsForAFencedEffectUnderACoveringGrant(t *testing.T) {
	f := newFixture(t)
	modes, err := gateway.NewModes(gateway.ModeRule{Pattern: "local/*", Mode: gateway.Shadow})
	if err != nil {
		t.Fatal(err)
	}
	alarm := &shadowAlarm{}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Modes: modes, Alarm: alarm})
	if err != nil {
		t.Fatal(err)
	}
	write := func(caller, body string) gateway.Request {
		tok, vg := f.kit.VerifiedGrant(func(g *fencegate.Grant) {
			g.Resource, g.FenceToken, g.Lease, g.OperationRoot = "local/inv", 5, "lease-5", "root-5"
		})
		return gateway.Request{Caller: caller, GrantToken: tok, StatusToken: f.kit.Status(vg, nil), Segment: 1,
			Resource: resource, Target: fencegate.ObjectTarget("local", key), Method: "PUT", PayloadDigest: "sha256:" + body,
			Effect: gateway.ObjectPut{Store: f.obj, Key: key, Body: strings.NewReader(body), Size: int64(len(body))}}
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f.obj.set(func(ctx context.Context, req fencegate.PutRequest) (string, error) {
		if !strings.HasPrefix(req.Meta.ReceiptID, "shadow_") {
			once.Do(func() { close(entered) })
			<-release
		}
		return f.obj.ObjectStore.Put(ctx, req)
	}, nil)
	type answer struct {
		res gateway.Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := gw.Apply(context.Background(), write(owner, "fenced"))
		done <- answer{r, err}
	}()
	<-entered
	_, err = gw.Apply(context.Background(), write("someone-else", "shadowed"))
	close(release)
	fenced := <-done
	if fencegate.ErrorCode(err) != fencegate.CodeResourceBusy {
		t.Errorf("the shadow forward beside the fenced effect: %v, want RESOURCE_BUSY", err)
	}
	// Not forwarded, its verdict is counted all the same: the contention
	// is where shadow mode shows would-be refusals.
	if len(alarm.verdicts) != 1 || alarm.verdicts[0] != fencegate.CodeOwnerMismatch {
		t.Errorf("verdicts counted: %v, want the refused request's OWNER_MISMATCH", alarm.verdicts)
	}
	if fenced.err != nil || fenced.res.Receipt.State != fencegate.ReceiptCommitted {
		t.Fatalf("the fenced write: %+v %v, want COMMITTED", fenced.res.Receipt, fenced.err)
	}
	if got := f.content(); got != "fenced" {
		t.Fatalf("object = %q, want the fenced write's", got)
	}
}
