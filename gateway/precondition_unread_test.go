package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// TestPreconditionFailureWithTheObjectUnreadableStaysUnknown: a store's
// retry of a conditional write meets 412 (or a retried delete meets it)
// when its own first attempt landed unanswered; when the object then cannot
// be read to tell whose version it holds, the outcome is UNKNOWN for the
// reconciler, never FAILED with BACKEND_CONFLICT (the write did land).
func TestPreconditionFailureWithTheObjectUnreadableStaysUnknown(t *testing.T) {
	st, etag := localObjects(t)
	unreadable := func(context.Context, string) (fencegate.ObjectInfo, error) {
		return fencegate.ObjectInfo{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "timeout")
	}
	st.set(func(ctx context.Context, req fencegate.PutRequest) (string, error) {
		if _, err := st.ObjectStore.Put(ctx, req); err != nil { // the first attempt lands, its answer is lost
			return "", err
		}
		return "", &fencegate.Error{Code: fencegate.CodeBackendConflict, Message: "412 on the retry", Err: fencegate.ErrPreconditionFailed}
	}, unreadable)
	put := gateway.ObjectPut{Store: st, Key: "k", Body: strings.NewReader("v2"), Size: 2}
	o, err := put.Apply(context.Background(), objectReceipt(), etag)
	if o.State != fencegate.ReceiptUnknown || fencegate.ErrorCode(err) == fencegate.CodeBackendConflict {
		t.Fatalf("put that landed, 412 on its retry, object unreadable: %s %v; want UNKNOWN", o.State, err)
	}

	st2, etag2 := localObjects(t)
	st2.set(nil, unreadable)
	del := deleteLandedThen412{faultyStore: st2}
	o, err = gateway.ObjectDelete{Store: del, Key: "k"}.Apply(context.Background(), objectReceipt(), etag2)
	if o.State != fencegate.ReceiptUnknown || fencegate.ErrorCode(err) == fencegate.CodeBackendConflict {
		t.Fatalf("delete that landed, 412 on its retry, object unreadable: %s %v; want UNKNOWN", o.State, err)
	}
}

// deleteLandedThen412 deletes, then answers as a retry meeting 412 would.
type deleteLandedThen412 struct{ *faultyStore }

func (d deleteLandedThen412) Delete(ctx context.Context, key, ifMatch string) error {
	if err := d.faultyStore.ObjectStore.Delete(ctx, key, ifMatch); err != nil {
		return err
	}
	return &fencegate.Error{Code: fencegate.CodeBackendConflict, Message: "412 on the retry", Err: fencegate.ErrPreconditionFailed}
}
