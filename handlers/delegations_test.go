package handlers_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/e2e/upstream"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// delegatedPayout sends a payout as delegate (its token) under owner's grant
// p at segment seg, with a delegation of segments [from, to] and a status
// proof issued for it.
func (e *apiEnv) delegatedPayout(p payer, delegate, token string, from, to uint64, seg int, extra map[string]string) apiReply {
	e.t.Helper()
	d := fencegate.Delegation{
		Schema: fencegate.DelegationSchema, ID: "dlg-" + strconv.FormatUint(p.vg.FenceToken, 10), GrantDigest: p.vg.Digest,
		Resource: p.vg.Resource, Lease: p.vg.Lease, Owner: p.vg.Owner, Delegate: delegate, FenceToken: p.vg.FenceToken,
		OperationRoot: p.vg.OperationRoot, SegmentFrom: from, SegmentTo: to, IssuerEpoch: e.kit.Epoch(), IssuedAt: e.kit.Now().UnixMilli(),
	}
	tok, err := e.kit.Signer().SignDelegation(d)
	if err != nil {
		e.t.Fatal(err)
	}
	hdr := map[string]string{
		"Fence-Grant": p.grant, "Fence-Delegation": tok,
		"Fence-Status":  e.kit.Status(p.vg, func(s *fencegate.Status) { s.Delegation = d.ID }),
		"Fence-Segment": strconv.Itoa(seg), "Content-Type": "application/json",
	}
	for k, v := range extra {
		hdr[k] = v
	}
	return e.send("POST", payoutPath, token, hdr, payoutBody)
}

// TestNativeFenceServiceChecksFenceRootSegmentAndDelegateItself pins the
// native-fence contract: a cooperating service is sent the grant's fence,
// root and segment on every admitted call, and the delegate's identity on a
// delegated one (never a worker's own values of those headers), so it can
// refuse by itself. Two gateways with separate fence stores front it: the
// old owner's delegate, admitted by a gateway that never saw the new fence,
// is refused by the service once the new owner's fence reached it.
func TestNativeFenceServiceChecksFenceRootSegmentAndDelegateItself(t *testing.T) {
	kit := prooftest.New(t)
	pay := upstream.New(upstream.Options{Credential: upSecret, FenceHeader: "Fence-Token", RootHeader: "Fence-Root",
		SegmentHeader: "Fence-Segment", DelegateHeader: "Fence-Delegate", Now: kit.Now})
	native := func(c *httpapi.APIConfig) {
		c.Contract = httpapi.Contract{NativeFence: &httpapi.NativeFence{Header: "Fence-Token"}}
	}
	g1 := newAPIEnv(t, kit, pay, native)
	g2 := newAPIEnv(t, kit, pay, native)
	old := g1.grantFor(payerA, payerTokA, 2)

	// The owner's own call: no delegate named, even when the worker sends one.
	r := g1.send("POST", payoutPath, old.token, map[string]string{
		"Fence-Grant": old.grant, "Fence-Status": kit.Status(old.vg, nil), "Fence-Segment": "1",
		"Content-Type": "application/json", "Fence-Delegate": "spoofed", "Fence-Root": "spoofed"}, payoutBody)
	if po := wantPaid(t, r); po.Delegate != "" || po.Root != "root-2" || po.Segment != 1 || po.Fence != 2 {
		t.Fatalf("owner's payout as the service saw it: %+v", po)
	}
	// The delegate's call: the service learns who.
	po := wantPaid(t, g1.delegatedPayout(old, payerB, payerTokB, 2, 9, 2, map[string]string{"Fence-Delegate": "spoofed"}))
	if po.Delegate != payerB || po.Root != "root-2" || po.Segment != 2 || po.Fence != 2 {
		t.Fatalf("delegate's payout as the service saw it: %+v", po)
	}
	if h := g1.seen[1]; h.Get("Fence-Token") != "2" || h.Get("Fence-Segment") != "2" || h.Get("Fence-Root") != "root-2" || h.Get("Fence-Delegate") != payerB {
		t.Fatalf("headers sent: %v", h)
	}

	// A new owner's fence reaches the service through g1; the old owner's
	// delegate goes through g2, which has seen neither fence and admits it
	// (a fence new to it starts at segment 1): the service refuses it.
	wantPaid(t, g1.payout(g1.grantFor(payerA, payerTokA, 3), 1, payoutBody))
	if r := g2.delegatedPayout(old, payerB, payerTokB, 1, 9, 1, nil); r.status != http.StatusConflict || !strings.Contains(string(r.body), "stale_fence") {
		t.Fatalf("late delegate: %d %s", r.status, r.body)
	}
	if pay.Effects() != 3 || pay.StaleFences() != 1 {
		t.Fatalf("effects %d, stale %d", pay.Effects(), pay.StaleFences())
	}
}
