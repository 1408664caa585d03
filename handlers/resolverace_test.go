package handlers_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// TestOperatorVerdictFirstStopsTheOverdueResend: an overdue UNKNOWN payout
// whose key is still retained (the reconciler would resend it) is resolved
// NOT_APPLIED by an operator first. The reconciler's and a replay's resend
// then find it settled at their claim: nothing is sent upstream after the
// verdict, and the verdict stands.
func TestOperatorVerdictFirstStopsTheOverdueResend(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	id, path := e.lostPayout(a)
	stale := e.receipt(id) // what a reconciler pass read before the verdict
	e.kit.Advance(15 * time.Minute)
	if r := e.send("POST", path, "admin-token", nil, `{"state":"NOT_APPLIED","note":"checked"}`); r.status != http.StatusOK {
		t.Fatalf("resolve: %d %s", r.status, r.body)
	}
	requests := e.pay.Requests()
	if !e.api.WillResend(stale) {
		t.Fatal("the stale read should still allow a resend")
	}
	// The resend path of a pass that read the receipt before the verdict.
	if _, err := e.store.Settle(context.Background(), id, fencegate.Outcome{State: fencegate.ReceiptUnknown,
		Resend: true, Error: stale.Error, Now: e.kit.Now()}); fencegate.ErrorCode(err) != fencegate.CodeReceiptSettled {
		t.Fatalf("claim after the verdict: %v, want RECEIPT_SETTLED", err)
	}
	if _, err := e.rc.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := e.pay.Requests(); n != requests {
		t.Fatalf("%d requests upstream after the operator's verdict", n-requests)
	}
	if got := e.receipt(id); got.State != fencegate.ReceiptNotApplied {
		t.Fatalf("verdict overwritten: %s", got.State)
	}
}

// TestClaimedResendFirstRefusesTheOperatorsVerdict: a resend claimed the
// overdue receipt (its SettledAt moved) before the operator's verdict landed:
// a verdict read before the claim fails its precondition, and one read after
// it is STILL_RECONCILING while the resend may be open; both change nothing.
// Once the API's timeout has passed, the verdict is accepted.
func TestClaimedResendFirstRefusesTheOperatorsVerdict(t *testing.T) {
	e := newAPIEnv(t, nil, nil, nil)
	a := e.grantFor(payerA, payerTokA, 1)
	id, path := e.lostPayout(a)
	e.kit.Advance(15 * time.Minute)
	read := e.receipt(id) // the operator's read
	claimed, err := e.store.Settle(context.Background(), id, fencegate.Outcome{State: fencegate.ReceiptUnknown,
		Resend: read.Resend, Error: read.Error, Now: e.kit.Now()}) // the resend's claim
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Settle(context.Background(), id, fencegate.Outcome{State: fencegate.ReceiptNotApplied,
		IfSettledAt: *read.SettledAt, Now: e.kit.Now()}); fencegate.ErrorCode(err) != fencegate.CodeStillReconciling {
		t.Fatalf("verdict read before the claim: %v, want STILL_RECONCILING", err)
	}
	wantCode(t, e.send("POST", path, "admin-token", nil, `{"state":"NOT_APPLIED"}`), http.StatusConflict, fencegate.CodeStillReconciling)
	if got := e.receipt(id); got.State != fencegate.ReceiptUnknown || !got.SettledAt.Equal(*claimed.SettledAt) {
		t.Fatalf("a refused verdict changed the receipt: %+v", got)
	}
	e.kit.Advance(time.Minute)
	if r := e.send("POST", path, "admin-token", nil, `{"state":"NOT_APPLIED"}`); r.status != http.StatusOK {
		t.Fatalf("resolve after the resend's timeout: %d %s", r.status, r.body)
	}
}
