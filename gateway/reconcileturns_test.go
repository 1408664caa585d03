package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/fencestore/memory"
	"github.com/fencegate/fencegate/gateway"
)

// Rule: UNKNOWN receipts that wait for a person (no resolver settles them)
// do not keep newer ones from the reconciler once there are more of them
// than a pass looks at: passes read the list in turns, and a newer write
// whose object never landed is settled NOT_APPLIED.
func TestReceiptsBehindAPassLimitOfStuckOnesAreReconciledInTurn(t *testing.T) {
	defer gateway.SetPassLimit(5)()
	ctx := context.Background()
	st := memory.New()
	objs, err := local.New("local", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	admit := func(i int, store string) string {
		g := fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: fmt.Sprintf("%s/r%d", store, i), Owner: "o", Lease: "l",
			FenceToken: 1, OperationID: "op", OperationRoot: "root", IssuedAt: now.UnixMilli()}, Digest: "sha256:g"}
		id := fmt.Sprintf("rcpt_%02d", i)
		if _, err := st.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: 1, Target: gateway.ObjectTarget(store, fmt.Sprintf("r%d", i)),
			Method: "PUT", PayloadDigest: "sha256:p", ReceiptID: id, Now: now, EffectTimeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Settle(ctx, id, fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: "no answer", Now: now}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		return id
	}
	for i := range 12 { // a store no resolver serves: they wait for a person
		admit(i, "gone")
	}
	newer := admit(12, "local")
	clock := now.Add(10 * time.Minute)
	rc := &gateway.Reconciler{Store: st, Now: func() time.Time { return clock }, Orphan: 2 * time.Minute, Resolver: func(target string) gateway.Resolver {
		if _, _, ok := gateway.SplitObjectTarget(target); ok && target[:len("objects/local/")] == "objects/local/" {
			return gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"local": objs}, Now: func() time.Time { return clock },
				EffectTimeout: time.Minute, Grace: 2 * time.Minute}
		}
		return nil
	}}
	for pass := 0; pass < 4; pass++ {
		if _, err := rc.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := st.Receipt(ctx, newer); err != nil || r.State != fencegate.ReceiptNotApplied {
		t.Fatalf("the newer UNKNOWN write behind 12 stuck ones (a pass looks at 5): %s %v, want NOT_APPLIED", r.State, err)
	}
}
