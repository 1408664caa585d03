package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/gateway"
)

func objectReceipt() fencegate.Receipt {
	return fencegate.Receipt{ID: "rcpt_obj", Resource: "objects/local/k", Target: "objects/local/k", FenceToken: 1, Segment: 1,
		OperationRoot: "root", OperationID: "op", PayloadDigest: "d", State: fencegate.ReceiptPending, CreatedAt: time.Now()}
}

func localObjects(t *testing.T) (*faultyStore, string) {
	t.Helper()
	loc, err := local.New("local", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	etag, err := loc.Put(context.Background(), fencegate.PutRequest{Key: "k", Body: strings.NewReader("v1"), Size: 2, IfNoneMatch: true})
	if err != nil {
		t.Fatal(err)
	}
	return &faultyStore{ObjectStore: loc}, etag
}

// TestWriteNeverSentPastItsLandingDeadlineFailsAtOnce: a put or delete that
// the store refused unsent (its landing deadline had passed) is FAILED, not
// UNKNOWN: nothing can land, so the resource need not wait for the
// reconciler. The object is unchanged.
func TestWriteNeverSentPastItsLandingDeadlineFailsAtOnce(t *testing.T) {
	st, etag := localObjects(t)
	late := fencegate.WithLandBy(context.Background(), time.Now().Add(-time.Second))
	put := gateway.ObjectPut{Store: st, Key: "k", Body: strings.NewReader("v2"), Size: 2}
	if o, err := put.Apply(late, objectReceipt(), etag); o.State != fencegate.ReceiptFailed || err == nil {
		t.Fatalf("put past its landing deadline: %s %v; want FAILED", o.State, err)
	}
	del := gateway.ObjectDelete{Store: st, Key: "k"}
	if o, err := del.Apply(late, objectReceipt(), etag); o.State != fencegate.ReceiptFailed || err == nil {
		t.Fatalf("delete past its landing deadline: %s %v; want FAILED", o.State, err)
	}
	if info, err := st.Head(context.Background(), "k"); err != nil || info.ETag != etag {
		t.Fatalf("object after refused writes: %+v %v; want unchanged", info, err)
	}
}

// TestCertainRefusalFailsAndUncertainFailureStaysUnknown: a store error that
// proves nothing was applied (fencegate.ErrNotApplied) is FAILED; a timeout,
// a 5xx or a lost answer (BACKEND_UNAVAILABLE without that proof) stays
// UNKNOWN, even when the object does not show the write yet.
func TestCertainRefusalFailsAndUncertainFailureStaysUnknown(t *testing.T) {
	st, etag := localObjects(t)
	put := gateway.ObjectPut{Store: st, Key: "k", Body: strings.NewReader("v2"), Size: 2}
	st.set(func(context.Context, fencegate.PutRequest) (string, error) {
		return "", fencegate.Wrap(fencegate.ErrNotApplied, fencegate.CodeBackendUnavailable, "403 AccessDenied on the only attempt")
	}, nil)
	if o, _ := put.Apply(context.Background(), objectReceipt(), etag); o.State != fencegate.ReceiptFailed {
		t.Fatalf("a certain refusal: %s; want FAILED", o.State)
	}
	for _, msg := range []string{"timeout", "500 InternalError", "connection reset after the body was sent"} {
		st.set(func(context.Context, fencegate.PutRequest) (string, error) {
			return "", fencegate.Errorf(fencegate.CodeBackendUnavailable, "%s", msg)
		}, nil)
		if o, _ := put.Apply(context.Background(), objectReceipt(), etag); o.State != fencegate.ReceiptUnknown {
			t.Fatalf("%s: %s; want UNKNOWN", msg, o.State)
		}
	}
}
