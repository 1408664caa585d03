package registry

import (
	"slices"

	"github.com/fencegate/fencegate"
)

// Issuing is one consistent view of what the registry signs with: grants and
// status proofs of one issuance are built from a single Issuing, so a proof's
// epoch and its signing key always agree.
type Issuing struct {
	// Signer signs for Epoch.
	Signer Signer
	// Epoch and PolicyGeneration are stamped into every new grant.
	Epoch, PolicyGeneration uint64
	// Revoked holds the revoked epochs (never modified once handed out):
	// grants of a revoked epoch are stated REVOKED.
	Revoked map[uint64]bool
	// Standing are earlier, unrevoked epochs whose grants the registry still
	// attests: a key rotation's overlap window. Revocation has no overlap.
	Standing []uint64
}

// Authority supplies the registry's issuing state. Package authority owns
// that state (rotation, revocation, policy generation) and implements it;
// the registry only reads it, once per issuance.
type Authority interface {
	Issuing() Issuing
}

// StaticAuthority is an Authority that never changes (tests, and a registry
// built from Config.Signer alone).
type StaticAuthority Issuing

// Issuing returns s.
func (s StaticAuthority) Issuing() Issuing { return Issuing(s) }

// PolicyGeneration is the policy generation stamped into new grants.
func (r *Registry) PolicyGeneration() uint64 { return r.auth.Issuing().PolicyGeneration }

// IssuerEpoch is the issuer epoch stamped into new grants and status proofs.
func (r *Registry) IssuerEpoch() uint64 { return r.auth.Issuing().Epoch }

// attestable are the epochs whose grants a status proof may be signed for,
// current first, then the standing ones, then the revoked ones (stated REVOKED).
func (a Issuing) attestable() []uint64 {
	out := append([]uint64{a.Epoch}, a.Standing...)
	for e := range a.Revoked {
		out = append(out, e)
	}
	slices.Sort(out[1+len(a.Standing):])
	return out
}

// digestFor is the digest of the grant the registry issues for l under
// epoch e and policy generation gen: the signer's own digest, so it is the
// same bytes a worker holds.
func (a Issuing) digestFor(l fencegate.Lease, e, gen uint64) (string, error) {
	g := grantFor(l, a)
	g.IssuerEpoch, g.PolicyGeneration = e, gen
	if d, ok := a.Signer.(interface {
		GrantDigest(fencegate.Grant) (string, error)
	}); ok {
		return d.GrantDigest(g)
	}
	_, digest, err := a.Signer.SignGrant(g)
	return digest, err
}
