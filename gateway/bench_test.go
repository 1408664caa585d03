package gateway_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/memory"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

var noEffect = gateway.EffectFunc(func(_ context.Context, r fencegate.Receipt, _ string) (fencegate.Outcome, error) {
	return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: r.ID}, nil
})

// BenchmarkStoreAdmitSettle is the baseline: the in-memory store alone
// admitting and settling segments under one grant.
func BenchmarkStoreAdmitSettle(b *testing.B) {
	kit := prooftest.New(b)
	_, vg := kit.VerifiedGrant(func(g *fencegate.Grant) { g.Resource = resource })
	st := memory.New()
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		adm, err := st.Admit(ctx, fencegate.AdmitRequest{Grant: vg, Segment: uint64(i + 1), Target: "objects/local/inv/7",
			Method: "PUT", PayloadDigest: "sha256:x", ReceiptID: gateway.NewID("r_"), Now: kit.Now()})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v", Now: kit.Now()}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcceptancePoint is the same work through Gateway.Apply: grant and
// status verification (cached by exact bytes), binding checks, the
// per-resource lock and a no-op effect. Its ratio to the baseline is the
// acceptance point's own cost.
func BenchmarkAcceptancePoint(b *testing.B) {
	kit := prooftest.New(b)
	tok, vg := kit.VerifiedGrant(func(g *fencegate.Grant) { g.Resource = resource })
	status := kit.Status(vg, nil)
	gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: memory.New(), Now: kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Log: discardLog})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if _, err := gw.Apply(ctx, gateway.Request{Caller: owner, GrantToken: tok, StatusToken: status, Segment: uint64(i + 1),
			Resource: resource, Target: "objects/local/inv/7", Method: "PUT", PayloadDigest: "sha256:x", Effect: noEffect}); err != nil {
			b.Fatal(err)
		}
	}
}
