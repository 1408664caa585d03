package prooftest_test

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

func TestKitIssuesValidTokens(t *testing.T) {
	k := prooftest.New(t)
	tok, digest := k.Grant(nil)
	vg, err := k.Verifier().VerifyGrant(tok)
	if err != nil {
		t.Fatal(err)
	}
	if vg.Digest != digest || vg.IssuerEpoch != 1 || vg.PolicyGeneration != 1 || vg.KeyID != k.Signer().KeyID() {
		t.Fatalf("grant %+v", vg)
	}
	st, err := k.Verifier().VerifyStatus(k.Status(vg, nil), vg)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != fencegate.StateHeld || st.ExpiresAtMs-st.IssuedAtMs != fencegate.DefaultStatusLife.Milliseconds() ||
		st.IssuedAtMs != k.Now().UnixMilli() {
		t.Fatalf("status %+v", st)
	}
	// StatusFor takes a grant and its digest.
	if _, err := k.Verifier().VerifyStatus(k.StatusFor(vg.Grant, digest, nil), vg); err != nil {
		t.Fatal(err)
	}
}

func TestKitClockDrivesTheVerifier(t *testing.T) {
	k := prooftest.New(t)
	_, vg := k.VerifiedGrant(func(g *fencegate.Grant) { g.FenceToken = 42 })
	if vg.FenceToken != 42 {
		t.Fatalf("fence %d", vg.FenceToken)
	}
	st := k.Status(vg, nil)
	k.Advance(fencegate.DefaultStatusLife)
	_, err := k.Verifier().VerifyStatus(st, vg)
	if fencegate.ErrorCode(err) != fencegate.CodeStatusInvalid {
		t.Fatalf("expired status: %v", err)
	}
	k.Set(k.Now().Add(-time.Millisecond))
	if _, err := k.Verifier().VerifyStatus(st, vg); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Verifier().VerifyStatus(k.Status(vg, func(s *fencegate.Status) { s.State = fencegate.StateRevoked }), vg); err == nil {
		t.Fatal("REVOKED status accepted")
	}
}

func TestKitRotate(t *testing.T) {
	k := prooftest.New(t)
	old, _ := k.Grant(nil)
	s := k.Rotate()
	if k.Epoch() != 2 || k.Bundle().Version() != 2 || k.Signer() != s {
		t.Fatalf("epoch %d version %d", k.Epoch(), k.Bundle().Version())
	}
	_, vg := k.VerifiedGrant(nil)
	if vg.IssuerEpoch != 2 || vg.KeyID != s.KeyID() {
		t.Fatalf("grant %+v", vg)
	}
	if _, err := k.Verifier().VerifyGrant(old); err != nil {
		t.Fatalf("old key dropped by rotation: %v", err)
	}
}

// Rule: DecodeGrant reads back the claims a token was signed with, and
// refuses a token that is not a compact JWS.
func TestDecodeGrantReadsTheSignedClaims(t *testing.T) {
	k := prooftest.New(t)
	want := k.NewGrant(func(g *fencegate.Grant) { g.FenceToken, g.IssuerEpoch = 42, 7 })
	tok, _, err := k.Signer().SignGrant(want)
	if err != nil {
		t.Fatal(err)
	}
	if g := prooftest.GrantOf(t, tok); g.FenceToken != 42 || g.IssuerEpoch != 7 || g.Resource != want.Resource {
		t.Fatalf("decoded %+v, signed %+v", g, want)
	}
	for _, bad := range []string{"", "a.b", `{"fenceToken":1}`, "a.!!.c", "a." + "bm90IGpzb24" + ".c"} {
		if _, err := prooftest.DecodeGrant(bad); err == nil {
			t.Errorf("DecodeGrant(%q) answered no error", bad)
		}
	}
}
