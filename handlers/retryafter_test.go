package handlers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/e2e/upstream"
)

// TestReplayHonoursTheUpstreamsRetryAfter: the upstream answers "in progress"
// with Retry-After: 2 (DESIGN §4: retry later under the same key). A replay of
// the segment before those 2 s is MUTATION_UNKNOWN with Retry-After and sends
// nothing upstream; one after them resends under the key and is paid.
func TestReplayHonoursTheUpstreamsRetryAfter(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	e.pay.Inject(upstream.InProgress)
	wantCode(t, e.payout(a, 1, payoutBody), http.StatusBadGateway, fencegate.CodeMutationUnknown)
	requests := e.pay.Requests()

	e.kit.Advance(time.Second)
	a = e.grantFor(payerA, payerTokA, 1)
	early := e.payout(a, 1, payoutBody)
	wantCode(t, early, http.StatusBadGateway, fencegate.CodeMutationUnknown)
	if got := early.header.Get("Retry-After"); got != "1" {
		t.Fatalf("replay before the upstream's Retry-After: Retry-After %q, want \"1\"", got)
	}
	if n := e.pay.Requests(); n != requests {
		t.Fatalf("a replay inside the upstream's Retry-After sent %d requests upstream", n-requests)
	}

	e.kit.Advance(time.Second)
	a = e.grantFor(payerA, payerTokA, 1)
	wantPaid(t, e.payout(a, 1, payoutBody))
	if e.pay.Requests() != requests+1 || e.pay.Effects() != 1 {
		t.Fatalf("after Retry-After: %d requests, %d effects", e.pay.Requests()-requests, e.pay.Effects())
	}
}
