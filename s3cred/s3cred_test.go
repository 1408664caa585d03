package s3cred_test

import (
	"context"
	"encoding/base32"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs/prooftest"
	"github.com/fencegate/fencegate/s3cred"
)

// registrySource plays the registry: one lease, stated as state.
type registrySource struct {
	kit   *prooftest.Kit
	d     *s3cred.Deriver
	lease string
	state fencegate.StatusState
	grant func(*fencegate.Grant)
	err   error
	calls int
}

func (s *registrySource) ResolveS3(_ context.Context, lease string) (s3cred.Resolved, error) {
	s.calls++
	if s.err != nil {
		return s3cred.Resolved{}, s.err
	}
	if lease != s.lease {
		return s3cred.Resolved{}, fencegate.Errorf(fencegate.CodeNotFound, "no lease %s", lease)
	}
	tok, vg := s.kit.VerifiedGrant(func(g *fencegate.Grant) {
		g.Lease = s.lease
		if s.grant != nil {
			s.grant(g)
		}
	})
	st := s.kit.Status(vg, func(st *fencegate.Status) { st.State = s.state })
	return s3cred.Resolved{State: s.state, Grant: tok, StatusProof: st, Secret: s.d.Secret(lease)}, nil
}

const leaseID = "lease_ABCDEFGHIJKLMNOPQRSTUVWX23"

func setup(t *testing.T) (*s3cred.Deriver, *registrySource, *s3cred.Resolver) {
	kit := prooftest.New(t)
	d, err := s3cred.NewDeriver([]byte(strings.Repeat("k", s3cred.KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	src := &registrySource{kit: kit, d: d, lease: leaseID, state: fencegate.StateHeld}
	return d, src, &s3cred.Resolver{Verifier: kit.Verifier(), Source: src}
}

func TestAccessKeyIDNamesItsLeaseAndNothingElse(t *testing.T) {
	for _, id := range []string{leaseID, "lease-7", "lease_lower", strings.Repeat("x", 75)} {
		ak, err := s3cred.AccessKeyID(id)
		if err != nil {
			t.Fatalf("%q: %v", id, err)
		}
		back, err := s3cred.LeaseOf(ak)
		if err != nil || back != id {
			t.Fatalf("LeaseOf(AccessKeyID(%q)) = %q, %v", id, back, err)
		}
		if len(ak) > 128 || strings.ContainsAny(ak, "/=") {
			t.Fatalf("access key ID %q is not usable in a SigV4 credential scope", ak)
		}
	}
	if ak, _ := s3cred.AccessKeyID(leaseID); ak != "FGLABCDEFGHIJKLMNOPQRSTUVWX23" {
		t.Fatalf("registry lease ID maps to %q", ak)
	}
	for _, ak := range []string{"", "AKIAIOSFODNN7EXAMPLE", "FGL", "FGLabc", "FGX", "FGX!!", "FGXMFRGG==="} {
		if _, err := s3cred.LeaseOf(ak); fencegate.ErrorCode(err) != fencegate.CodeUnauthenticated {
			t.Fatalf("LeaseOf(%q): %v, want UNAUTHENTICATED", ak, err)
		}
	}
	if _, err := s3cred.AccessKeyID(strings.Repeat("x", 76)); err == nil {
		t.Fatal("an over-long lease ID became an access key ID")
	}
}

func TestHeldLeaseResolvesToItsGrantOwnerAndDerivedSecret(t *testing.T) {
	d, src, r := setup(t)
	c, err := d.For(leaseID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.LookupS3(context.Background(), c.AccessKeyID)
	if err != nil {
		t.Fatal(err)
	}
	if got.SecretAccessKey != c.SecretAccessKey || got.Identity != prooftest.DefaultOwner || got.Resource != prooftest.DefaultResource ||
		got.Lease != leaseID || got.State != fencegate.StateHeld || got.Grant == "" || got.Status == "" || got.SessionToken != "" {
		t.Fatalf("credential %+v does not match the lease", got)
	}
	vg, _ := src.kit.Verifier().VerifyGrant(got.Grant)
	if _, err := src.kit.Verifier().VerifyStatus(got.Status, vg); err != nil {
		t.Fatalf("the credential's status proof does not verify: %v", err)
	}
	if len(c.SecretAccessKey) != 40 {
		t.Fatalf("secret %q is not 40 characters", c.SecretAccessKey)
	}
}

func TestEndedLeaseResolvesNotHeldAtTheNextRequest(t *testing.T) {
	for _, state := range []fencegate.StatusState{fencegate.StateReleased, fencegate.StateExpired, fencegate.StateRevoked} {
		t.Run(string(state), func(t *testing.T) {
			d, src, r := setup(t)
			c, _ := d.For(leaseID)
			if _, err := r.LookupS3(context.Background(), c.AccessKeyID); err != nil {
				t.Fatal(err)
			}
			src.state = state // the lease ends between two requests
			got, err := r.LookupS3(context.Background(), c.AccessKeyID)
			if err != nil || got.State != state {
				t.Fatalf("lookup after %s: %+v, %v", state, got, err)
			}
			if src.calls != 2 {
				t.Fatalf("registry asked %d times, want once per request", src.calls)
			}
		})
	}
}

func TestHeldWithoutAVerifyingProofIsRefused(t *testing.T) {
	d, src, r := setup(t)
	c, _ := d.For(leaseID)
	other := prooftest.New(t) // a proof signed by a key outside the trust bundle
	src.kit, r.Verifier = other, src.kit.Verifier()
	if _, err := r.LookupS3(context.Background(), c.AccessKeyID); err == nil {
		t.Fatal("a grant and proof outside the trust bundle resolved")
	}
}

func TestGrantOfAnotherLeaseIsRefused(t *testing.T) {
	d, src, r := setup(t)
	c, _ := d.For(leaseID)
	src.grant = func(g *fencegate.Grant) { g.Lease = "lease_OTHER" }
	if _, err := r.LookupS3(context.Background(), c.AccessKeyID); fencegate.ErrorCode(err) != fencegate.CodeGrantInvalid {
		t.Fatalf("registry answered another lease's grant: %v, want GRANT_INVALID", err)
	}
}

func TestUnknownKeysAreNotFoundAndRegistryFaultsUnavailable(t *testing.T) {
	d, src, r := setup(t)
	for _, ak := range []string{"AKIAIOSFODNN7EXAMPLE", "FGLZZZZ"} {
		if _, err := r.LookupS3(context.Background(), ak); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
			t.Fatalf("%s: %v, want NOT_FOUND", ak, err)
		}
	}
	c, _ := d.For(leaseID)
	src.err = fencegate.Errorf(fencegate.CodeBackendUnavailable, "registry down")
	if _, err := r.LookupS3(context.Background(), c.AccessKeyID); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("registry down: %v, want BACKEND_UNAVAILABLE", err)
	}
}

func TestSecretNeedsTheRegistryKeyAndDiffersPerLease(t *testing.T) {
	d, _, _ := setup(t)
	other, _ := s3cred.NewDeriver([]byte(strings.Repeat("x", s3cred.KeySize)))
	if d.Secret(leaseID) == other.Secret(leaseID) {
		t.Fatal("a deriver with another key derives the same secret")
	}
	if d.Secret(leaseID) == d.Secret("lease_B") {
		t.Fatal("two leases share a secret")
	}
	if _, err := s3cred.NewDeriver([]byte("short")); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
		t.Fatalf("short key: %v", err)
	}
}

func TestALeaseHasOneAccessKeyID(t *testing.T) {
	// "FGX" + base32 of a registry lease ID decodes to that lease, but its own
	// key is "FGL...": the second spelling is refused, so per-key state (a
	// multipart upload's owner, the open-upload bound) is per lease.
	alt := "FGX" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte(leaseID))
	if _, err := s3cred.LeaseOf(alt); fencegate.ErrorCode(err) != fencegate.CodeUnauthenticated {
		t.Fatalf("LeaseOf(%q): %v, want UNAUTHENTICATED", alt, err)
	}
	own, _ := s3cred.AccessKeyID(leaseID)
	if back, err := s3cred.LeaseOf(own); err != nil || back != leaseID {
		t.Fatalf("LeaseOf(%q) = %q, %v", own, back, err)
	}
}
