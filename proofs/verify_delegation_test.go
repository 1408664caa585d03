package proofs_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

const delegationInvalid = fencegate.CodeDelegationInvalid
const delegationHdr = `{"alg":"EdDSA","kid":"k1","typ":"leasedelegation+jws"}`

func (f *fixture) delegation(vg fencegate.VerifiedGrant, mod func(*fencegate.Delegation)) fencegate.Delegation {
	d := fencegate.Delegation{
		Schema: fencegate.DelegationSchema, ID: "dlg-1", GrantDigest: vg.Digest, Resource: vg.Resource,
		Lease: vg.Lease, Owner: vg.Owner, Delegate: "consumer-1", FenceToken: vg.FenceToken,
		OperationRoot: vg.OperationRoot, SegmentFrom: 2, SegmentTo: 5, IssuerEpoch: 1,
		IssuedAt: f.clock().UnixMilli(),
	}
	if mod != nil {
		mod(&d)
	}
	return d
}

func (f *fixture) delegationJSON(vg fencegate.VerifiedGrant, mod func(*fencegate.Delegation)) []byte {
	b, err := json.Marshal(f.delegation(vg, mod))
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func TestSignedDelegationVerifiesAndBindsItsGrant(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	tok, err := f.signer.SignDelegation(f.delegation(vg, nil))
	mustOK(t, err)
	d, err := f.v.VerifyDelegation(tok, vg)
	mustOK(t, err)
	if d.Delegate != "consumer-1" || !d.CoversSegment(2) || !d.CoversSegment(5) || d.CoversSegment(1) || d.CoversSegment(6) {
		t.Fatalf("delegation %+v", d)
	}
	// The crafted form every rejection below mutates is accepted too.
	_, err = f.v.VerifyDelegation(f.craft(delegationHdr, f.delegationJSON(vg, nil)), vg)
	mustOK(t, err)
}

// A delegation is verified under the grant's rules: the same header, key and
// JSON checks refuse it, as DELEGATION_INVALID.
func TestDelegationFollowsTheGrantVerificationRules(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	good := string(f.delegationJSON(vg, nil))
	cases := map[string]struct{ tok, want string }{
		"alg none":       {f.craft(`{"alg":"none","kid":"k1","typ":"leasedelegation+jws"}`, []byte(good)), `"none" is refused`},
		"unknown kid":    {f.craft(`{"alg":"EdDSA","kid":"k9","typ":"leasedelegation+jws"}`, []byte(good)), "not in the trust bundle"},
		"embedded jwk":   {f.craft(`{"alg":"EdDSA","jwk":{},"kid":"k1","typ":"leasedelegation+jws"}`, []byte(good)), `"jwk" is refused`},
		"crit":           {f.craft(`{"alg":"EdDSA","crit":["x"],"kid":"k1","typ":"leasedelegation+jws"}`, []byte(good)), `"crit" is refused`},
		"grant typ":      {f.craft(grantHdr, []byte(good)), "typ"},
		"duplicate key":  {f.craft(delegationHdr, []byte(strings.Replace(good, `"delegate":"consumer-1"`, `"delegate":"consumer-1","delegate":"consumer-2"`, 1))), "duplicate JSON key"},
		"trailing data":  {f.craft(delegationHdr, []byte(good+"{}")), "trailing data"},
		"unknown field":  {f.craft(delegationHdr, []byte(strings.Replace(good, `{`, `{"admin":true,`, 1))), "unknown field"},
		"fence overflow": {f.craft(delegationHdr, []byte(strings.Replace(good, `"fenceToken":7`, `"fenceToken":18446744073709551616`, 1))), "does not fit"},
		"oversized":      {strings.Repeat("a", proofs.DefaultMaxTokenSize+1), "exceeds the limit"},
		"bad signature":  {flipSig(f.craft(delegationHdr, []byte(good))), "signature does not verify"},
		"epoch mismatch": {f.craft(delegationHdr, f.delegationJSON(vg, func(d *fencegate.Delegation) { d.IssuerEpoch = 2 })), "issuerEpoch 2"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := f.v.VerifyDelegation(c.tok, vg)
			wantRejected(t, err, delegationInvalid, c.want)
		})
	}
}

func TestDelegationForAnotherGrantIsRejected(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	for claim, mod := range map[string]func(*fencegate.Delegation){
		"grantDigest":   func(d *fencegate.Delegation) { d.GrantDigest = "sha256:00" },
		"resource":      func(d *fencegate.Delegation) { d.Resource = "bucket/other" },
		"lease":         func(d *fencegate.Delegation) { d.Lease = "lease-2" },
		"owner":         func(d *fencegate.Delegation) { d.Owner = "worker-b" },
		"fenceToken":    func(d *fencegate.Delegation) { d.FenceToken = 8 },
		"operationRoot": func(d *fencegate.Delegation) { d.OperationRoot = "root-2" },
	} {
		t.Run(claim, func(t *testing.T) {
			tok, err := f.signer.SignDelegation(f.delegation(vg, mod))
			mustOK(t, err)
			_, err = f.v.VerifyDelegation(tok, vg)
			wantRejected(t, err, delegationInvalid, "its "+claim+" is not the grant's")
		})
	}
}

func TestMalformedDelegationIsRejected(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	for name, mod := range map[string]func(*fencegate.Delegation){
		"no delegate":       func(d *fencegate.Delegation) { d.Delegate = "" },
		"no id":             func(d *fencegate.Delegation) { d.ID = "" },
		"range and set":     func(d *fencegate.Delegation) { d.Segments = []uint64{3} },
		"neither":           func(d *fencegate.Delegation) { d.SegmentFrom, d.SegmentTo = 0, 0 },
		"empty range":       func(d *fencegate.Delegation) { d.SegmentFrom, d.SegmentTo = 5, 4 },
		"zero in set":       func(d *fencegate.Delegation) { d.SegmentFrom, d.SegmentTo, d.Segments = 0, 0, []uint64{0} },
		"repeat in set":     func(d *fencegate.Delegation) { d.SegmentFrom, d.SegmentTo, d.Segments = 0, 0, []uint64{3, 3} },
		"prefix outside":    func(d *fencegate.Delegation) { d.TargetPrefix = "bucket/reportsX" },
		"prefix not a name": func(d *fencegate.Delegation) { d.TargetPrefix = "bucket/reports/../x" },
		"wrong schema":      func(d *fencegate.Delegation) { d.Schema = fencegate.GrantSchema },
		"no issuedAt":       func(d *fencegate.Delegation) { d.IssuedAt = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			tok, err := f.signer.SignDelegation(f.delegation(vg, mod))
			mustOK(t, err)
			_, err = f.v.VerifyDelegation(tok, vg)
			wantRejected(t, err, delegationInvalid)
		})
	}
}

// A delegate's status proof names its delegation; the owner's proof does not.
// Neither stands in for the other, so a revoked delegation (the registry no
// longer issues its proof) is refused within one proof life whatever proofs
// the owner holds.
func TestDelegateAndOwnerStatusProofsDoNotStandInForEachOther(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	owner := f.statusToken(vg, nil)
	delegate := f.statusToken(vg, func(s *fencegate.Status) { s.Delegation = "dlg-1" })
	other := f.statusToken(vg, func(s *fencegate.Status) { s.Delegation = "dlg-2" })

	_, err := f.v.VerifyStatus(owner, vg)
	mustOK(t, err)
	_, err = f.v.VerifyDelegationStatus(delegate, vg, "dlg-1")
	mustOK(t, err)

	_, err = f.v.VerifyStatus(delegate, vg)
	wantRejected(t, err, fencegate.CodeStatusInvalid, "issued to a delegate")
	_, err = f.v.VerifyDelegationStatus(owner, vg, "dlg-1")
	wantRejected(t, err, fencegate.CodeStatusInvalid, "not issued for delegation")
	_, err = f.v.VerifyDelegationStatus(other, vg, "dlg-1")
	wantRejected(t, err, fencegate.CodeStatusInvalid, "not issued for delegation")
	_, err = f.v.VerifyDelegationStatus(delegate, vg, "")
	wantRejected(t, err, fencegate.CodeStatusInvalid)
}

func TestDelegationSegmentSetAndTargetPrefix(t *testing.T) {
	d := fencegate.Delegation{Segments: []uint64{2, 4}, Resource: "bucket/reports", TargetPrefix: "bucket/reports/q1"}
	if !d.CoversSegment(2) || d.CoversSegment(3) || !d.CoversSegment(4) {
		t.Fatal("segment set")
	}
	if !d.CoversTarget("bucket/reports/q1") || !d.CoversTarget("bucket/reports/q1/a") || d.CoversTarget("bucket/reports/q10") || d.CoversTarget("bucket/reports") {
		t.Fatal("target prefix")
	}
}
