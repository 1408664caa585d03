package registry

import (
	"context"
	"maps"
	"sync"

	"github.com/fencegate/fencegate"
)

// authority is the registry's mutable issuing state: the signer and its
// issuer epoch, the policy generation, and the revoked epochs. Grants and
// proofs are issued from one consistent snapshot of it.
type authority struct {
	mu        sync.RWMutex
	signer    Signer
	epoch     uint64
	policyGen uint64
	revoked   map[uint64]bool
}

type authoritySnapshot struct {
	signer    Signer
	epoch     uint64
	policyGen uint64
	revoked   map[uint64]bool
}

func (a *authority) snapshot() authoritySnapshot {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return authoritySnapshot{signer: a.signer, epoch: a.epoch, policyGen: a.policyGen, revoked: a.revoked}
}

// AuthorityState is the part of the registry's state an operator changes:
// it is what must be persisted and restored across restarts.
type AuthorityState struct {
	IssuerEpoch      uint64   `json:"issuerEpoch"`
	PolicyGeneration uint64   `json:"policyGeneration"`
	RevokedEpochs    []uint64 `json:"revokedEpochs"`
}

// State returns the current authority state.
func (r *Registry) State() AuthorityState {
	a := r.auth.snapshot()
	st := AuthorityState{IssuerEpoch: a.epoch, PolicyGeneration: a.policyGen, RevokedEpochs: []uint64{}}
	for e := range a.revoked {
		st.RevokedEpochs = append(st.RevokedEpochs, e)
	}
	return st
}

// PolicyGeneration is the policy generation stamped into new grants.
func (r *Registry) PolicyGeneration() uint64 { return r.auth.snapshot().policyGen }

// IssuerEpoch is the issuer epoch stamped into new grants and status proofs.
func (r *Registry) IssuerEpoch() uint64 { return r.auth.snapshot().epoch }

// EpochRevoked reports whether grants of epoch are refused.
func (r *Registry) EpochRevoked(epoch uint64) bool { return r.auth.snapshot().revoked[epoch] }

// Rotate makes signer, whose key belongs to epoch, sign everything from now
// on. epoch must be above the current one. Leases keep their fences; asking
// for a lease's status re-issues its grant under the new epoch.
func (r *Registry) Rotate(signer Signer, epoch uint64) error {
	r.auth.mu.Lock()
	defer r.auth.mu.Unlock()
	if signer == nil || epoch <= r.auth.epoch {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "rotation needs a signer for an epoch above %d", r.auth.epoch)
	}
	r.auth.signer, r.auth.epoch = signer, epoch
	return nil
}

// RevokeEpoch refuses every grant of epoch from now on: status proofs and
// status queries state such grants REVOKED. The current epoch cannot be
// revoked; rotate to a new one first.
func (r *Registry) RevokeEpoch(epoch uint64) error {
	r.auth.mu.Lock()
	defer r.auth.mu.Unlock()
	if epoch == 0 || epoch >= r.auth.epoch {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "only epochs below the current epoch %d can be revoked; rotate first", r.auth.epoch)
	}
	revoked := maps.Clone(r.auth.revoked)
	revoked[epoch] = true
	r.auth.revoked = revoked
	return nil
}

// BumpPolicy raises the policy generation; grants of older generations are
// POLICY_STALE at gateways that know the new generation.
func (r *Registry) BumpPolicy() uint64 {
	r.auth.mu.Lock()
	defer r.auth.mu.Unlock()
	r.auth.policyGen++
	return r.auth.policyGen
}

// Restore sets the authority state (epochs revoked, policy generation) saved
// by State. The issuer epoch must equal the signer's: it is checked, not set.
func (r *Registry) Restore(st AuthorityState) error {
	r.auth.mu.Lock()
	defer r.auth.mu.Unlock()
	if st.IssuerEpoch != r.auth.epoch {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "saved issuer epoch %d differs from the signer's epoch %d", st.IssuerEpoch, r.auth.epoch)
	}
	revoked := maps.Clone(r.auth.revoked) // a restore never lifts a revocation
	for _, e := range st.RevokedEpochs {
		if e == 0 || e >= r.auth.epoch {
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "saved state revokes epoch %d, not below the current epoch %d", e, r.auth.epoch)
		}
		revoked[e] = true
	}
	r.auth.revoked = revoked
	r.auth.policyGen = max(r.auth.policyGen, st.PolicyGeneration)
	return nil
}

// AttestStatus is GrantStatus signed: a status proof bound to g's digest,
// for gateways in query mode that reach the registry over the network. g's
// signature was checked by the asking gateway; the registry checks that it
// names this lease, resource, owner and fence, and states REVOKED for a
// revoked epoch.
func (r *Registry) AttestStatus(ctx context.Context, g fencegate.VerifiedGrant) (string, error) {
	a := r.auth.snapshot() // the proof's epoch and its signing key must agree
	st, err := r.grantStatus(ctx, g, a)
	if err != nil {
		return "", err
	}
	tok, err := a.signer.SignStatus(st)
	if err != nil {
		return "", fencegate.Wrap(err, fencegate.CodeInternal, "sign status")
	}
	return tok, nil
}
