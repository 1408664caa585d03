package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/e2e/upstream"
)

// TestReplayOfUnknownSegmentResendsAndReturnsTheSettledAnswer: the payout is
// made but its answer is lost; the worker sends the segment again; the
// gateway resends the kept request under the same key and answers the
// upstream's saved answer: one payout, COMMITTED, two attempts.
func TestReplayOfUnknownSegmentResendsAndReturnsTheSettledAnswer(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	e.pay.Inject(upstream.DropResponse)
	lost := e.payout(a, 1, payoutBody)
	wantCode(t, lost, http.StatusBadGateway, fencegate.CodeMutationUnknown)
	again := e.payout(a, 1, payoutBody)
	po := wantPaid(t, again)
	if again.header.Get("Fence-Replay") != "true" || e.pay.Effects() != 1 {
		t.Fatalf("replay: %v, effects %d", again.header, e.pay.Effects())
	}
	rc, err := e.store.Receipt(context.Background(), again.header.Get("Fence-Receipt"))
	if err != nil || rc.State != fencegate.ReceiptCommitted || rc.Attempts != 2 || rc.Request == nil || rc.Request.Key != po.IdempotencyKey {
		t.Fatalf("receipt %+v %v", rc, err)
	}
	if e.api.Resends() != 1 {
		t.Fatalf("resends = %d, want 1", e.api.Resends())
	}
}

// TestSavedServerErrorIsNeverResentNorSettled: a 500 the API declares
// final for the key (Stripe-Should-Retry: false) leaves the receipt UNKNOWN;
// neither a replay nor the reconciler resends it, and it is never reported
// COMMITTED or NOT_APPLIED, although the payout was made.
func TestSavedServerErrorIsNeverResentNorSettled(t *testing.T) {
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) {
		c.Answers.Unknown = []httpapi.Match{{Header: "Stripe-Should-Retry: false"}}
	})
	a := e.grantFor(payerA, payerTokA, 1)
	e.pay.Inject(upstream.SavedServerError)
	wantCode(t, e.payout(a, 1, payoutBody), http.StatusBadGateway, fencegate.CodeMutationUnknown)
	requests := e.pay.Requests()
	wantCode(t, e.payout(a, 1, payoutBody), http.StatusBadGateway, fencegate.CodeMutationUnknown)
	if n, err := e.rc.RunOnce(context.Background()); err != nil || n != 0 {
		t.Fatalf("reconcile settled %d (%v)", n, err)
	}
	if e.pay.Requests() != requests || e.pay.Effects() != 1 {
		t.Fatalf("requests %d -> %d, effects %d", requests, e.pay.Requests(), e.pay.Effects())
	}
	var list struct {
		Receipts []fencegate.Receipt `json:"receipts"`
	}
	l := e.send("GET", "/v1/unknown", payerTokA, nil, "")
	if err := json.Unmarshal(l.body, &list); err != nil || len(list.Receipts) != 1 || list.Receipts[0].Resend {
		t.Fatalf("unknown list: %s", l.body)
	}
}
