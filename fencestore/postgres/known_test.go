package postgres

import (
	"fmt"
	"testing"

	"github.com/fencegate/fencegate"
)

// TestKnownReceiptsHoldAtMostTheirByteBudget: receipts another replica
// settled stay in the cache until evicted, so what they hold is bounded in
// bytes, not only in count; dropping and replacing a receipt keeps the
// count of held bytes exact.
func TestKnownReceiptsHoldAtMostTheirByteBudget(t *testing.T) {
	var k known
	body := make([]byte, maxKnownBody)
	n := 3 * maxKnownBodies / maxKnownBody
	for i := range n {
		k.learn(nil, []fencegate.Receipt{{ID: fmt.Sprintf("r%d", i), State: fencegate.ReceiptPending,
			Request: &fencegate.EffectRequest{Body: body}}})
	}
	if k.bodies > maxKnownBodies {
		t.Fatalf("kept %d request bytes, over the budget of %d", k.bodies, maxKnownBodies)
	}
	if got, want := len(k.receipts), maxKnownBodies/maxKnownBody; got != want {
		t.Fatalf("kept %d receipts of %d bytes, want %d", got, maxKnownBody, want)
	}
	if _, ok := k.receipt(fmt.Sprintf("r%d", n-1)); !ok {
		t.Fatal("the receipt learnt last was not kept")
	}
	sum := func() int {
		s := 0
		for _, r := range k.receipts {
			s += bodyLen(r)
		}
		return s
	}
	if k.bodies != sum() {
		t.Fatalf("byte count %d, receipts hold %d", k.bodies, sum())
	}
	id := fmt.Sprintf("r%d", n-1)
	k.learn(nil, []fencegate.Receipt{{ID: id, State: fencegate.ReceiptCommitted}})
	k.forget(nil, []string{fmt.Sprintf("r%d", n-2)})
	k.learn(nil, []fencegate.Receipt{{ID: "small", State: fencegate.ReceiptPending, Request: &fencegate.EffectRequest{Body: []byte("x")}}})
	if k.bodies != sum() {
		t.Fatalf("after settle, forget and a new receipt: byte count %d, receipts hold %d", k.bodies, sum())
	}
	if _, ok := k.receipt(id); ok {
		t.Fatal("a receipt learnt settled is still kept")
	}
}
