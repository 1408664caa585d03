package handlers_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
)

func TestEffectKeyIsKeptInTheReceiptAndABadOneChangesNothing(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	call := func(seg int, key string) apiReply {
		return e.send("POST", payoutPath, a.token, map[string]string{
			"Fence-Grant": a.grant, "Fence-Status": e.kit.Status(a.vg, nil), "Fence-Segment": strconv.Itoa(seg),
			"Content-Type": "application/json", "Fence-Effect-Key": key}, payoutBody)
	}
	before := e.state()
	for _, bad := range []string{"two words", strings.Repeat("k", fencegate.MaxEffectKey+1)} {
		wantCode(t, call(1, bad), http.StatusBadRequest, fencegate.CodeInvalidRequest)
		e.wantUnchanged(before)
	}
	r := call(1, "order-42-charge")
	wantPaid(t, r)
	rc, err := e.store.Receipt(context.Background(), r.header.Get("Fence-Receipt"))
	if err != nil || rc.EffectKey != "order-42-charge" {
		t.Fatalf("receipt effect key = %q (%v)", rc.EffectKey, err)
	}
	if e.pay.Payouts()[0].IdempotencyKey == "order-42-charge" {
		t.Fatal("the worker's effect key reached the upstream as its idempotency key")
	}
	// The same segment under another effect key is another effect: quarantined, not replayed.
	before = e.state()
	wantCode(t, call(1, "order-43-charge"), http.StatusConflict, fencegate.CodeQuarantined)
	if e.pay.Effects() != 1 {
		t.Fatalf("effects = %d, want 1", e.pay.Effects())
	}
	e.wantUnchanged(before)
}
