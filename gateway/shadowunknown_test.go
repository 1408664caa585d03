package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
)

// TestShadowForwardOfUnknownOutcomeDoesNotWedgeTheTarget: a shadow forward
// has no receipt, so nothing reconciles it. When its write lands but both
// its answer and the HEAD after it are lost, the target's recorded version
// stays the one before it. The owner's next fenced write then fails its
// condition on an object naming the shadow receipt: it is refused
// BACKEND_CONFLICT without overwriting anything, and the gateway records
// that object's version, so the owner's retry of the segment is COMMITTED
// (before, every later write of the target was BACKEND_CONFLICT).
func TestShadowForwardOfUnknownOutcomeDoesNotWedgeTheTarget(t *testing.T) {
	f := shadowFixture(t, nil)
	gw := f.gw
	ctx := context.Background()
	if _, err := gw.Apply(ctx, f.request(6, 1, "new")); err != nil {
		t.Fatal(err)
	}
	var lose atomic.Bool
	lose.Store(true)
	f.loseAnswers(&lose)
	if res, err := gw.Apply(ctx, f.request(5, 1, "stale")); res.Receipt.State != fencegate.ReceiptUnknown || f.content() != "stale" {
		t.Fatalf("shadow forward: %s, %v, object %q; want UNKNOWN with the write landed", res.Receipt.State, err, f.content())
	}
	lose.Store(false)
	f.obj.set(nil, nil)
	if _, err := gw.Apply(ctx, f.request(6, 2, "new2")); fencegate.ErrorCode(err) != fencegate.CodeBackendConflict || f.content() != "stale" {
		t.Fatalf("owner's write on the shadow forward's object: %v, object %q; want BACKEND_CONFLICT and nothing overwritten", err, f.content())
	}
	if r, err := gw.Apply(ctx, f.request(6, 2, "new2")); err != nil || r.Receipt.State != fencegate.ReceiptCommitted || f.content() != "new2" {
		t.Fatalf("owner's retry: %s, %v, object %q; want COMMITTED with new2", r.Receipt.State, err, f.content())
	}
}

// loseAnswers makes f's object store land every put but lose its answer,
// and fail every HEAD, while lose is set.
func (f *fixture) loseAnswers(lose *atomic.Bool) {
	f.obj.set(func(ctx context.Context, req fencegate.PutRequest) (string, error) {
		etag, err := f.obj.ObjectStore.Put(ctx, req)
		if err != nil || !lose.Load() {
			return etag, err
		}
		return "", fencegate.Errorf(fencegate.CodeBackendUnavailable, "timeout: answer lost")
	}, func(ctx context.Context, key string) (fencegate.ObjectInfo, error) {
		if lose.Load() {
			return fencegate.ObjectInfo{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "timeout")
		}
		return f.obj.ObjectStore.Head(ctx, key)
	})
}
