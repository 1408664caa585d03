package handlers_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/e2e/upstream"
)

func TestOperatorResolvesUnknownReceipt(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	e.pay.Inject(upstream.Reset)
	lost := e.payout(a, 1, payoutBody)
	wantCode(t, lost, http.StatusBadGateway, fencegate.CodeMutationUnknown)
	var p struct {
		ReceiptID string `json:"receiptId"`
	}
	_ = json.Unmarshal(lost.body, &p)
	path := "/v1/unknown/" + p.ReceiptID + "/resolve"
	// A workload credential is not an operator's.
	wantCode(t, e.send("POST", path, payerTokA, nil, `{"state":"NOT_APPLIED"}`), http.StatusForbidden, fencegate.CodeForbidden)
	wantCode(t, e.send("POST", path, "admin-token", nil, `{"state":"FAILED"}`), http.StatusBadRequest, fencegate.CodeInvalidRequest)
	// Past the reconcile deadline it waits for a person (before it, see
	// TestManualResolutionIsRefusedWhileTheReconcilerStillResends).
	e.kit.Advance(15 * time.Minute)
	r := e.send("POST", path, "admin-token", nil, `{"state":"NOT_APPLIED","note":"checked the provider dashboard"}`)
	var rc fencegate.Receipt
	if r.status != http.StatusOK || json.Unmarshal(r.body, &rc) != nil || rc.State != fencegate.ReceiptNotApplied || !strings.Contains(rc.Error, "ops") {
		t.Fatalf("resolve: %d %s", r.status, r.body)
	}
	// A final state never changes: a second verdict is RECEIPT_SETTLED.
	wantCode(t, e.send("POST", path, "admin-token", nil, `{"state":"COMMITTED"}`), http.StatusConflict, fencegate.CodeReceiptSettled)
	a = e.grantFor(payerA, payerTokA, 1)    // the same lease, its grant renewed
	wantPaid(t, e.payout(a, 1, payoutBody)) // the segment number was given back
	if e.pay.Effects() != 1 {
		t.Fatalf("effects = %d", e.pay.Effects())
	}
}

// lostPayout sends a payout whose answer is lost and returns its UNKNOWN receipt's resolve path.
func (e *apiEnv) lostPayout(a payer) (id, path string) {
	e.t.Helper()
	e.pay.Inject(upstream.Reset)
	lost := e.payout(a, 1, payoutBody)
	wantCode(e.t, lost, http.StatusBadGateway, fencegate.CodeMutationUnknown)
	var p struct {
		ReceiptID string `json:"receiptId"`
	}
	_ = json.Unmarshal(lost.body, &p)
	return p.ReceiptID, "/v1/unknown/" + p.ReceiptID + "/resolve"
}

func (e *apiEnv) receipt(id string) fencegate.Receipt {
	e.t.Helper()
	rc, err := e.store.Receipt(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return rc
}

// An UNKNOWN receipt the reconciler still resends (key retained, attempts
// left, before the deadline) is not the operator's to settle: a NOT_APPLIED
// by hand would make the resend's payment unrecordable. It is refused with
// STILL_RECONCILING and nothing changes; the resend then records the payment.
func TestManualResolutionIsRefusedWhileTheReconcilerStillResends(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	id, path := e.lostPayout(a)
	before, rcBefore := e.state(), e.receipt(id)
	for _, body := range []string{`{"state":"NOT_APPLIED"}`, `{"state":"COMMITTED"}`} {
		r := e.send("POST", path, "admin-token", nil, body)
		wantCode(t, r, http.StatusConflict, fencegate.CodeStillReconciling)
		if r.header.Get("Fence-Receipt") != id {
			t.Fatalf("refusal names receipt %q, want %s", r.header.Get("Fence-Receipt"), id)
		}
		e.wantUnchanged(before)
		if got := e.receipt(id); !reflect.DeepEqual(got, rcBefore) {
			t.Fatalf("refused resolution changed the receipt:\n%+v\n%+v", rcBefore, got)
		}
	}
	if n, err := e.rc.RunOnce(context.Background()); err != nil || n != 1 {
		t.Fatalf("reconcile: %d %v", n, err)
	}
	if got := e.receipt(id); got.State != fencegate.ReceiptCommitted {
		t.Fatalf("the resend's payment was not recorded: %+v", got)
	}
	if e.pay.Effects() != 1 {
		t.Fatalf("effects = %d", e.pay.Effects())
	}
}

// A receipt whose strategy has given up (here: every allowed send made)
// waits for a person before the deadline too.
func TestManualResolutionIsAcceptedOnceTheStrategyGaveUp(t *testing.T) {
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) { c.Settle.MaxAttempts = 1 })
	a := e.grantFor(payerA, payerTokA, 1)
	id, path := e.lostPayout(a)
	if !e.api.GaveUp(e.receipt(id)) {
		t.Fatalf("one send of one allowed: the strategy should have given up on %+v", e.receipt(id))
	}
	r := e.send("POST", path, "admin-token", nil, `{"state":"NOT_APPLIED","note":"checked"}`)
	if r.status != http.StatusOK || e.receipt(id).State != fencegate.ReceiptNotApplied {
		t.Fatalf("resolve after the strategy gave up: %d %s", r.status, r.body)
	}
}
