package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/gateway"
)

const delegate = "consumer-1"

// delegated turns the owner's request into the delegate's: the caller is the
// delegate, the request carries a delegation of its grant (changed by mod)
// and a status proof issued for that delegation.
func (f *fixture) delegated(req gateway.Request, mod func(*fencegate.Delegation)) gateway.Request {
	f.t.Helper()
	vg, err := f.kit.Verifier().VerifyGrant(req.GrantToken)
	if err != nil {
		f.t.Fatal(err)
	}
	d := fencegate.Delegation{
		Schema: fencegate.DelegationSchema, ID: "dlg-1", GrantDigest: vg.Digest, Resource: vg.Resource,
		Lease: vg.Lease, Owner: vg.Owner, Delegate: delegate, FenceToken: vg.FenceToken,
		OperationRoot: vg.OperationRoot, SegmentFrom: 2, SegmentTo: 10, IssuerEpoch: f.kit.Epoch(),
		IssuedAt: f.kit.Now().UnixMilli(),
	}
	if mod != nil {
		mod(&d)
	}
	tok, err := f.kit.Signer().SignDelegation(d)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Caller, req.DelegationToken = delegate, tok
	req.StatusToken = f.kit.Status(vg, func(s *fencegate.Status) { s.Delegation = d.ID })
	return req
}

// A delegate's write is admitted under the owner's grant, then the same
// fence and segment rules apply: the next segment lands, a skipped one is
// SEGMENT_OUT_OF_ORDER.
func TestDelegateWritesUnderTheOwnersFenceAndSegmentRules(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.gw.Apply(ctx, f.request(5, 1, "s1")); err != nil {
		t.Fatal(err)
	}
	res, err := f.gw.Apply(ctx, f.delegated(f.request(5, 2, "s2"), nil))
	if err != nil {
		t.Fatalf("delegated segment 2: %v", err)
	}
	if res.Receipt.Segment != 2 || res.Receipt.FenceToken != 5 || f.content() != "s2" {
		t.Fatalf("receipt %+v, content %q", res.Receipt, f.content())
	}
	if _, err := f.gw.Apply(ctx, f.delegated(f.request(5, 4, "s4"), nil)); fencegate.ErrorCode(err) != fencegate.CodeSegmentOutOfOrder {
		t.Fatalf("skipped segment: %v", err)
	}
	if _, err := f.gw.Apply(ctx, f.delegated(f.request(5, 3, "s3"), func(d *fencegate.Delegation) {
		d.SegmentFrom, d.SegmentTo, d.Segments = 0, 0, []uint64{3}
	})); err != nil {
		t.Fatalf("segment set: %v", err)
	}
}

// A delegated write's receipt names its delegate and delegation beside the
// grant's owner, in the answer and in the store; the owner's own receipts
// name neither. Who sends a segment is not part of it: the owner's replay
// of the delegate's segment, and the delegate's of the owner's, answer the
// original receipt as it was, with nothing forwarded.
func TestDelegatedWritesReceiptNamesItsDelegate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	check := func(what string, r fencegate.Receipt, delegate, delegation string) {
		t.Helper()
		stored, err := f.store.Receipt(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []fencegate.Receipt{r, stored} {
			if r.Owner != owner || r.Delegate != delegate || r.DelegationID != delegation {
				t.Fatalf("%s receipt %s: owner %q, delegate %q, delegation %q; want %q, %q, %q",
					what, r.ID, r.Owner, r.Delegate, r.DelegationID, owner, delegate, delegation)
			}
		}
	}
	own, err := f.gw.Apply(ctx, f.request(5, 1, "s1"))
	if err != nil {
		t.Fatal(err)
	}
	check("the owner's", own.Receipt, "", "")
	whole := func(d *fencegate.Delegation) { d.SegmentFrom = 1 }
	res, err := f.gw.Apply(ctx, f.delegated(f.request(5, 2, "s2"), whole))
	if err != nil {
		t.Fatalf("delegated segment 2: %v", err)
	}
	check("the delegated write's", res.Receipt, delegate, "dlg-1")

	again, err := f.gw.Apply(ctx, f.request(5, 2, "s2"))
	if err != nil || !again.Replay || again.Receipt.ID != res.Receipt.ID {
		t.Fatalf("the owner's replay of segment 2: %+v, %v; want a replay of %s", again, err, res.Receipt.ID)
	}
	check("the owner's replay of the delegated write's", again.Receipt, delegate, "dlg-1")
	again, err = f.gw.Apply(ctx, f.delegated(f.request(5, 1, "s1"), whole))
	if err != nil || !again.Replay || again.Receipt.ID != own.Receipt.ID {
		t.Fatalf("the delegate's replay of segment 1: %+v, %v; want a replay of %s", again, err, own.Receipt.ID)
	}
	check("the delegate's replay of the owner's", again.Receipt, "", "")
	if f.content() != "s2" {
		t.Fatalf("content %q after the replays, want s2", f.content())
	}
}

// A delegated write refused QUARANTINED is recorded naming its delegate and
// delegation beside the grant's owner; the owner's refused write names
// neither. Nothing is forwarded, and the owner's repeat of the delegate's
// refused request counts on the same record, which keeps naming the
// delegate that first sent it.
func TestDelegatedWritesQuarantineRecordNamesItsDelegate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.gw.Apply(ctx, f.request(5, 1, "s1")); err != nil {
		t.Fatal(err)
	}
	whole := func(d *fencegate.Delegation) { d.SegmentFrom = 1 }
	refuse := func(what string, req gateway.Request, attempts int, delegate, delegation string) {
		t.Helper()
		if _, err := f.gw.Apply(ctx, req); fencegate.ErrorCode(err) != fencegate.CodeQuarantined {
			t.Fatalf("%s: %v, want QUARANTINED", what, err)
		}
		q, err := f.store.QuarantineRecord(ctx, fencegate.QuarantineID(resource, 5, 1, req.Target, req.Method, "", req.PayloadDigest))
		if err != nil || q.Attempts != attempts || q.Owner != owner || q.Delegate != delegate || q.DelegationID != delegation {
			t.Fatalf("%s: record %+v, %v; want %d attempts, owner %q, delegate %q, delegation %q",
				what, q, err, attempts, owner, delegate, delegation)
		}
		if f.content() != "s1" {
			t.Fatalf("%s: content %q, want the accepted s1", what, f.content())
		}
	}
	refuse("the delegate's rewrite of segment 1", f.delegated(f.request(5, 1, "x"), whole), 1, delegate, "dlg-1")
	refuse("the owner's repeat of it", f.request(5, 1, "x"), 2, delegate, "dlg-1")
	refuse("the owner's own rewrite", f.request(5, 1, "y"), 1, "", "")
}

// Every way a delegated write can fail its binding is refused before
// admission and changes no stored state.
func TestDelegatedWriteThatFailsItsBindingChangesNothing(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.gw.Apply(ctx, f.request(5, 1, "s1")); err != nil {
		t.Fatal(err)
	}
	before, content := f.storedState(), f.content()
	ownerProof := f.request(5, 2, "x").StatusToken
	cases := map[string]struct {
		req  func() gateway.Request
		code fencegate.Code
	}{
		"caller is not the delegate": {func() gateway.Request {
			r := f.delegated(f.request(5, 2, "x"), nil)
			r.Caller = "consumer-2"
			return r
		}, fencegate.CodeOwnerMismatch},
		"segment outside the range": {func() gateway.Request {
			return f.delegated(f.request(5, 11, "x"), nil)
		}, fencegate.CodeDelegationInvalid},
		"segment outside the set": {func() gateway.Request {
			return f.delegated(f.request(5, 2, "x"), func(d *fencegate.Delegation) { d.SegmentFrom, d.SegmentTo, d.Segments = 0, 0, []uint64{3} })
		}, fencegate.CodeDelegationInvalid},
		"target outside the prefix": {func() gateway.Request {
			return f.delegated(f.request(5, 2, "x"), func(d *fencegate.Delegation) { d.TargetPrefix = resource + "/sub" })
		}, fencegate.CodeResourceMismatch},
		"delegation of another grant": {func() gateway.Request {
			return f.delegated(f.request(5, 2, "x"), func(d *fencegate.Delegation) { d.GrantDigest = "sha256:00" })
		}, fencegate.CodeDelegationInvalid},
		"delegation of another fence": {func() gateway.Request {
			return f.delegated(f.request(5, 2, "x"), func(d *fencegate.Delegation) { d.FenceToken = 6 })
		}, fencegate.CodeDelegationInvalid},
		"forged delegation": {func() gateway.Request {
			r := f.delegated(f.request(5, 2, "x"), nil)
			// Change the signature's first character: every one of its bits
			// counts (its last two spell the top byte of Ed25519's S, which
			// is 0 one time in 16, so writing "AA" there often changed nothing).
			tok := r.DelegationToken
			sig := strings.LastIndexByte(tok, '.') + 1
			c := "A"
			if tok[sig] == 'A' {
				c = "B"
			}
			r.DelegationToken = tok[:sig] + c + tok[sig+1:]
			return r
		}, fencegate.CodeDelegationInvalid},
		"owner's status proof": {func() gateway.Request {
			r := f.delegated(f.request(5, 2, "x"), nil)
			r.StatusToken = ownerProof
			return r
		}, fencegate.CodeStatusInvalid},
		"proof of another delegation": {func() gateway.Request {
			r := f.delegated(f.request(5, 2, "x"), func(d *fencegate.Delegation) { d.ID = "dlg-2" })
			r2 := f.delegated(f.request(5, 2, "x"), nil)
			r.StatusToken = r2.StatusToken
			return r
		}, fencegate.CodeStatusInvalid},
		"segment left to the gateway": {func() gateway.Request {
			r := f.delegated(f.request(5, 2, "x"), nil)
			r.Segment, r.AssignSegment = 0, true
			return r
		}, fencegate.CodeDelegationInvalid},
		"no delegation and not the owner": {func() gateway.Request {
			r := f.request(5, 2, "x")
			r.Caller = delegate
			return r
		}, fencegate.CodeOwnerMismatch},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			req := c.req()
			if err := f.gw.Precheck(ctx, req); fencegate.ErrorCode(err) != c.code {
				t.Fatalf("precheck: %v, want %s", err, c.code)
			}
			if _, err := f.gw.Apply(ctx, req); fencegate.ErrorCode(err) != c.code {
				t.Fatalf("apply: %v, want %s", err, c.code)
			}
			if got := f.storedState(); got != before {
				t.Fatalf("state changed:\n%s\n%s", before, got)
			}
			if f.content() != content {
				t.Fatal("a refused delegated write was forwarded")
			}
		})
	}
}

// A delegate the access policy does not let write the resource as a delegate
// is FORBIDDEN, and so is every delegate of an owner no longer allowed to
// lease it; a delegate rule is enough, a lease rule not needed.
func TestDelegateOutsideThePolicyIsForbiddenWithoutStateChange(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.gw.Apply(ctx, f.request(5, 1, "s1")); err != nil {
		t.Fatal(err)
	}
	before := f.storedState()
	for name, rules := range map[string][]authz.Rule{
		"delegate not named": {{Identity: owner, Lease: []string{resource}}},
		"owner not allowed":  {{Identity: owner, Lease: []string{"local/other"}}, {Identity: delegate, Delegate: []string{resource}}},
	} {
		pol, err := authz.New(rules)
		if err != nil {
			t.Fatal(err)
		}
		gw := f.gatewayWith(gateway.Config{Access: pol})
		if _, err := gw.Apply(ctx, f.delegated(f.request(5, 2, "x"), nil)); fencegate.ErrorCode(err) != fencegate.CodeForbidden {
			t.Fatalf("%s: %v", name, err)
		}
		if got := f.storedState(); got != before {
			t.Fatalf("%s: state changed", name)
		}
	}
	pol, _ := authz.New([]authz.Rule{{Identity: owner, Lease: []string{resource}}, {Identity: delegate, Delegate: []string{resource}}})
	if _, err := f.gatewayWith(gateway.Config{Access: pol}).Apply(ctx, f.delegated(f.request(5, 2, "x"), nil)); err != nil {
		t.Fatalf("allowed delegate: %v", err)
	}
}

// Once a new owner raised the fence, the old owner's delegate is refused
// STALE_OWNER even with a segment number never used, whether its status
// proof is still fresh or has lapsed, and nothing changes.
func TestDelegateIsStaleOwnerOnceANewOwnerRaisedTheFence(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	old := f.delegated(f.request(5, 2, "late"), nil)
	if _, err := f.gw.Apply(ctx, f.request(5, 1, "s1")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.gw.Apply(ctx, f.request(6, 1, "new")); err != nil {
		t.Fatal(err)
	}
	before := f.storedState()
	if _, err := f.gw.Apply(ctx, old); fencegate.ErrorCode(err) != fencegate.CodeStaleOwner {
		t.Fatalf("fresh proof: %v", err)
	}
	f.kit.Advance(fencegate.DefaultStatusLife + time.Second)
	if _, err := f.gw.Apply(ctx, old); fencegate.ErrorCode(err) != fencegate.CodeStaleOwner {
		t.Fatalf("lapsed proof: %v", err)
	}
	if got := f.storedState(); got != before || f.content() != "new" {
		t.Fatalf("state changed: %s / %q", got, f.content())
	}
}

// delegationQuerier states delegated grants HELD unless the delegation is
// revoked, as the registry's query does.
type delegationQuerier struct {
	countingQuerier
	revoked map[string]bool
}

func (q *delegationQuerier) GrantDelegationStatus(_ context.Context, g fencegate.VerifiedGrant, d fencegate.Delegation) (fencegate.Status, error) {
	if q.revoked[d.ID] {
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeDelegationInvalid, "delegation %s is revoked", d.ID)
	}
	st, err := q.GrantStatus(context.Background(), g)
	st.Delegation = d.ID
	return st, err
}

// In query mode a delegated write asks the registry about its delegation: a
// revoked one is refused at once, with nothing stored; a querier that cannot
// state delegations refuses delegated writes (UNSUPPORTED).
func TestQueryModeRefusesARevokedDelegationAtOnce(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	q := &delegationQuerier{revoked: map[string]bool{}}
	gw := f.gatewayWith(gateway.Config{Querier: q})
	if _, err := gw.Apply(ctx, f.request(5, 1, "s1")); err != nil {
		t.Fatal(err)
	}
	req := f.delegated(f.request(5, 2, "s2"), nil)
	req.StatusToken = ""
	q.revoked["dlg-1"] = true
	before := f.storedState()
	if _, err := gw.Apply(ctx, req); fencegate.ErrorCode(err) != fencegate.CodeDelegationInvalid {
		t.Fatalf("revoked: %v", err)
	}
	if f.storedState() != before {
		t.Fatal("a revoked delegation changed state")
	}
	if _, err := f.gatewayWith(gateway.Config{Querier: &countingQuerier{}}).Apply(ctx, req); fencegate.ErrorCode(err) != fencegate.CodeUnsupported {
		t.Fatalf("querier without delegations: %v", err)
	}
	q.revoked["dlg-1"] = false
	if _, err := gw.Apply(ctx, req); err != nil {
		t.Fatalf("live delegation: %v", err)
	}
	if !strings.Contains(f.content(), "s2") {
		t.Fatalf("content %q", f.content())
	}
}

// gatewayWith is a gateway over the fixture's store and verifier with the
// access policy and querier of cfg.
func (f *fixture) gatewayWith(cfg gateway.Config) *gateway.Gateway {
	f.t.Helper()
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Access: cfg.Access, Querier: cfg.Querier})
	if err != nil {
		f.t.Fatal(err)
	}
	return gw
}
