package proofs_test

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

const statusInvalid = fencegate.CodeStatusInvalid

func TestStatusIsAccepted(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	st, err := f.v.VerifyStatus(f.statusToken(vg, nil), vg)
	mustOK(t, err)
	if st.GrantDigest != vg.Digest || st.State != fencegate.StateHeld || st.Revision != 4 {
		t.Fatalf("status %+v", st)
	}
}

func TestStatusExpiredIsRejected(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	tok := f.statusToken(vg, nil)
	_, err := f.v.VerifyStatus(tok, vg)
	mustOK(t, err)

	exp := t0.Add(fencegate.DefaultStatusLife)
	f.set(exp.Add(-time.Millisecond))
	_, err = f.v.VerifyStatus(tok, vg)
	mustOK(t, err)
	// exp is exclusive: at exp the proof is dead. The proof is cached by now,
	// and exp is still checked.
	f.set(exp)
	_, err = f.v.VerifyStatus(tok, vg)
	wantRejected(t, err, statusInvalid, "expired 0 ms ago")
	f.set(exp.Add(time.Minute))
	_, err = f.v.VerifyStatus(tok, vg)
	wantRejected(t, err, statusInvalid, "expired 60000 ms ago")

	// Uncached: a proof that is already dead when first seen.
	f.set(t0)
	dead := f.statusToken(vg, func(s *fencegate.Status) {
		s.IssuedAtMs = t0.Add(-10 * time.Second).UnixMilli()
		s.ExpiresAtMs = t0.Add(-5 * time.Second).UnixMilli()
	})
	_, err = f.v.VerifyStatus(dead, vg)
	wantRejected(t, err, statusInvalid, "expired")
}

func TestStatusOfAnotherGrantIsRejected(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	_, other := f.verifiedGrant(func(g *fencegate.Grant) { g.RequestID = "req-2" })
	if other.Digest == vg.Digest {
		t.Fatal("test grants have the same digest")
	}
	// A valid proof for the other grant, presented with vg.
	_, err := f.v.VerifyStatus(f.statusToken(other, nil), vg)
	wantRejected(t, err, statusInvalid, "grantDigest names another grant")

	for msg, mod := range map[string]func(*fencegate.Status){
		"grantDigest names another grant":          func(s *fencegate.Status) { s.GrantDigest = other.Digest },
		"resource is not the grant's resource":     func(s *fencegate.Status) { s.Resource = "bucket/other" },
		"lease is not the grant's lease":           func(s *fencegate.Status) { s.Lease = "lease-2" },
		"fenceToken is not the grant's fenceToken": func(s *fencegate.Status) { s.FenceToken = vg.FenceToken + 1 },
	} {
		_, err := f.v.VerifyStatus(f.statusToken(vg, mod), vg)
		wantRejected(t, err, statusInvalid, msg)
	}
	// A zero grant (no digest) never matches, even a proof with an empty digest.
	_, err = f.v.VerifyStatus(f.statusToken(fencegate.VerifiedGrant{}, nil), fencegate.VerifiedGrant{})
	wantRejected(t, err, statusInvalid, "the grant has no digest")
}

func TestStatusNotHeldIsRejected(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	for _, state := range []fencegate.StatusState{fencegate.StateExpired, fencegate.StateReleased, fencegate.StateRevoked, "held", ""} {
		_, err := f.v.VerifyStatus(f.statusToken(vg, func(s *fencegate.Status) { s.State = state }), vg)
		wantRejected(t, err, statusInvalid, `lease state is "`+string(state)+`", not HELD`)
	}
}

func TestStatusLongerThanMaxLifeIsRejected(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	iat := t0.UnixMilli()
	_, err := f.v.VerifyStatus(f.statusToken(vg, func(s *fencegate.Status) {
		s.ExpiresAtMs = iat + fencegate.MaxStatusLife.Milliseconds() + 1
	}), vg)
	wantRejected(t, err, statusInvalid, "exceeds the maximum 1m0s")
	// Exactly the maximum is allowed.
	_, err = f.v.VerifyStatus(f.statusToken(vg, func(s *fencegate.Status) {
		s.ExpiresAtMs = iat + fencegate.MaxStatusLife.Milliseconds()
	}), vg)
	mustOK(t, err)
	// Backdating iat does not buy a longer life either.
	_, err = f.v.VerifyStatus(f.statusToken(vg, func(s *fencegate.Status) {
		s.IssuedAtMs = iat - fencegate.MaxStatusLife.Milliseconds()
		s.ExpiresAtMs = iat + 1000
	}), vg)
	wantRejected(t, err, statusInvalid, "exceeds the maximum")
	// exp must come after iat.
	_, err = f.v.VerifyStatus(f.statusToken(vg, func(s *fencegate.Status) {
		s.IssuedAtMs = iat + 1000
		s.ExpiresAtMs = iat + 1000
	}), vg)
	wantRejected(t, err, statusInvalid, "exp is not after iat")
	// An iat far in the past cannot overflow exp-iat into an accepted life.
	_, err = f.v.VerifyStatus(f.statusToken(vg, func(s *fencegate.Status) {
		s.IssuedAtMs = math.MinInt64
		s.ExpiresAtMs = iat + 10*365*24*3600*1000
	}), vg)
	wantRejected(t, err, statusInvalid, "iat is older")
}

func TestStatusIssuedInTheFutureIsRejected(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	iat := t0.Add(fencegate.MaxClockSkew).UnixMilli()
	_, err := f.v.VerifyStatus(f.statusToken(vg, func(s *fencegate.Status) {
		s.IssuedAtMs, s.ExpiresAtMs = iat, iat+5000
	}), vg)
	mustOK(t, err)
	_, err = f.v.VerifyStatus(f.statusToken(vg, func(s *fencegate.Status) {
		s.IssuedAtMs, s.ExpiresAtMs = iat+1, iat+5001
	}), vg)
	wantRejected(t, err, statusInvalid, "iat is 2001 ms in the future")
}

func TestStatusSchemaIsChecked(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	_, err := f.v.VerifyStatus(f.statusToken(vg, func(s *fencegate.Status) { s.Schema = fencegate.GrantSchema }), vg)
	wantRejected(t, err, statusInvalid, `schema must be "grantStatus.v1"`)
}

func TestStatusEpochMismatchIsRejected(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	_, err := f.v.VerifyStatus(f.statusToken(vg, func(s *fencegate.Status) { s.IssuerEpoch = 2 }), vg)
	wantRejected(t, err, statusInvalid, `issuerEpoch 2 is not the epoch 1 of key "k1"`)
}

// A grant token is not a status proof.
func TestGrantAsStatusIsRejected(t *testing.T) {
	f := newFixture(t)
	tok, vg := f.verifiedGrant(nil)
	_, err := f.v.VerifyStatus(tok, vg)
	wantRejected(t, err, statusInvalid, `typ "lockgrant+jws" is not "grantstatus+jws"`)
}

// Status proofs get every token rule the grants get; a few, with the status code.
func TestStatusTokenRulesApply(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	good := f.statusOf(vg, nil)
	payload := []byte(`{"schema":"grantStatus.v1","grantDigest":"` + good.GrantDigest + `","resource":"bucket/reports","lease":"lease-1","fenceToken":7,"state":"HELD","revision":4,"issuerEpoch":1,"iat":` +
		strconv.FormatInt(good.IssuedAtMs, 10) + `,"exp":` + strconv.FormatInt(good.ExpiresAtMs, 10) + `}`)
	_, err := f.v.VerifyStatus(f.craft(statusHdr, payload), vg)
	mustOK(t, err)

	cases := map[string]string{
		"duplicate JSON key":    strings.Replace(string(payload), `"state":"HELD"`, `"state":"HELD","state":"HELD"`, 1),
		"trailing data":         string(payload) + "{}",
		`unknown field "extra"`: strings.Replace(string(payload), `{`, `{"extra":1,`, 1),
		"does not fit uint64":   strings.Replace(string(payload), `"revision":4`, `"revision":-4`, 1),
		"does not fit int64":    strings.Replace(string(payload), `,"exp"`, `.5,"exp"`, 1),
		`unknown field "Exp"`:   strings.Replace(string(payload), `"exp"`, `"Exp"`, 1),
		"fenceToken":            strings.Replace(string(payload), `"fenceToken":7`, `"fenceToken":18446744073709551623`, 1),
	}
	for want, p := range cases {
		_, err := f.v.VerifyStatus(f.craft(statusHdr, []byte(p)), vg)
		wantRejected(t, err, statusInvalid, want)
	}
	_, err = f.v.VerifyStatus(f.craft(`{"alg":"none","kid":"k1","typ":"grantstatus+jws"}`, payload), vg)
	wantRejected(t, err, statusInvalid, `"none" is refused`)
	_, err = f.v.VerifyStatus(f.craft(`{"alg":"EdDSA","jku":"https://x","kid":"k1","typ":"grantstatus+jws"}`, payload), vg)
	wantRejected(t, err, statusInvalid, `"jku" is refused`)
}

// TestStatementOfAnyStateIsAnswerOnlyWhereAsked: a status proof stating the
// lease REVOKED, EXPIRED or RELEASED is refused as a client's proof
// (VerifyStatus takes only HELD) and is a verified answer to a gateway's
// own query (VerifyStatement), with every other check kept: a state that
// is no lease state, or a statement bound to another grant, is refused
// there too.
func TestStatementOfAnyStateIsAnswerOnlyWhereAsked(t *testing.T) {
	f := newFixture(t)
	_, vg := f.verifiedGrant(nil)
	for _, state := range []fencegate.StatusState{fencegate.StateRevoked, fencegate.StateExpired, fencegate.StateReleased} {
		tok := f.statusToken(vg, func(s *fencegate.Status) { s.State = state })
		_, err := f.v.VerifyStatus(tok, vg)
		wantRejected(t, err, statusInvalid, "not HELD")
		st, err := f.v.VerifyStatement(tok, vg)
		mustOK(t, err)
		if st.State != state {
			t.Fatalf("statement of %s read as %s", state, st.State)
		}
	}
	_, err := f.v.VerifyStatement(f.statusToken(vg, func(s *fencegate.Status) { s.State = "GONE" }), vg)
	wantRejected(t, err, statusInvalid, "not a lease state")
	_, other := f.verifiedGrant(func(g *fencegate.Grant) { g.Lease = "lease-other" })
	_, err = f.v.VerifyStatement(f.statusToken(other, func(s *fencegate.Status) { s.State = fencegate.StateRevoked }), vg)
	wantRejected(t, err, statusInvalid)
}
