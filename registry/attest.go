package registry

import (
	"context"

	"github.com/fencegate/fencegate"
)

// AttestRequest asks for a signed status proof of one grant of a lease.
// GrantDigest names the grant; the registry finds which of its own grants of
// the lease it is (current epoch, a standing epoch of a rotation's overlap,
// or a revoked one) and never takes an epoch, owner or fence from the asker.
// Resource, Owner, FenceToken and IssuerEpoch may repeat the grant's claims;
// any given (non-zero) that differs from the grant is refused.
type AttestRequest struct {
	Lease       string
	GrantDigest string
	Resource    string
	Owner       string
	FenceToken  uint64
	IssuerEpoch uint64
	// Caller is the workload asking; it must own the lease. Empty means an
	// authenticated gateway identity asks, which may attest any lease.
	Caller string
}

// AttestStatus is the linearizable status query of gateways in query mode
// that reach the registry over the network: it reads the lease now and signs a
// status proof bound to the lease's grant named by req.GrantDigest. A digest
// that is not one of the lease's grants under the current policy generation is
// STATUS_INVALID; a caller that neither owns the lease nor is a gateway is
// OWNER_MISMATCH. Nothing is written.
func (r *Registry) AttestStatus(ctx context.Context, req AttestRequest) (string, error) {
	a := r.auth.Issuing() // the proof's epoch and its signing key must agree
	l, err := r.readForStatus(ctx, req.Lease)
	if err != nil {
		return "", err
	}
	if req.Caller != "" && req.Caller != l.Owner {
		return "", fencegate.Errorf(fencegate.CodeOwnerMismatch, "lease %s is not the caller's", l.ID)
	}
	st, err := r.attest(l, req, a, 0)
	if err != nil {
		return "", err
	}
	tok, err := a.Signer.SignStatus(st)
	if err != nil {
		return "", fencegate.Wrap(err, fencegate.CodeInternal, "sign status")
	}
	return tok, nil
}

// GrantStatus is the linearizable status query of gateways in query mode in
// this process: it reads the grant's lease now and returns its state,
// unsigned, under the same rule as AttestStatus (the grant's digest must be
// one of the lease's grants). A grant of an older policy generation is
// stated too: the gateway asking shares this process's policy and refuses
// it as POLICY_STALE, which tells the worker what to do.
func (r *Registry) GrantStatus(ctx context.Context, g fencegate.VerifiedGrant) (fencegate.Status, error) {
	a := r.auth.Issuing()
	l, err := r.readForStatus(ctx, g.Lease)
	if err != nil {
		return fencegate.Status{}, err
	}
	return r.attest(l, AttestRequest{Lease: g.Lease, GrantDigest: g.Digest, Resource: g.Resource, Owner: g.Owner,
		FenceToken: g.FenceToken, IssuerEpoch: g.IssuerEpoch}, a, g.PolicyGeneration)
}

// readForStatus reads a lease a status is asked for: an unknown lease is
// STATUS_INVALID (the grant names nothing this registry issued).
func (r *Registry) readForStatus(ctx context.Context, lease string) (fencegate.Lease, error) {
	if lease == "" {
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeStatusInvalid, "grant has no lease")
	}
	l, err := r.backend.Lease(ctx, lease, r.now())
	if fencegate.ErrorCode(err) == fencegate.CodeNotFound {
		return fencegate.Lease{}, fencegate.Wrap(err, fencegate.CodeStatusInvalid, "grant names an unknown lease")
	}
	return l, backendErr(err)
}

// attest states l's status for the grant req names, found by digest among
// the lease's grants under a (and, when olderGen is a policy generation below
// a's, under olderGen too).
func (r *Registry) attest(l fencegate.Lease, req AttestRequest, a Issuing, olderGen uint64) (fencegate.Status, error) {
	if req.GrantDigest == "" {
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeStatusInvalid, "grant has no digest")
	}
	if (req.Resource != "" && req.Resource != l.Resource) || (req.Owner != "" && req.Owner != l.Owner) ||
		(req.FenceToken != 0 && req.FenceToken != l.FenceToken) {
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeStatusInvalid, "grant does not match lease %s", l.ID)
	}
	gens := []uint64{a.PolicyGeneration}
	if olderGen != 0 && olderGen < a.PolicyGeneration {
		gens = append(gens, olderGen)
	}
	for _, gen := range gens {
		for _, e := range a.attestable() {
			d, err := a.digestFor(l, e, gen)
			if err != nil {
				return fencegate.Status{}, fencegate.Wrap(err, fencegate.CodeInternal, "grant digest")
			}
			if d != req.GrantDigest {
				continue
			}
			if req.IssuerEpoch != 0 && req.IssuerEpoch != e {
				return fencegate.Status{}, fencegate.Errorf(fencegate.CodeStatusInvalid, "the grant of lease %s with that digest is of epoch %d, not %d", l.ID, e, req.IssuerEpoch)
			}
			return r.statusFor(l, d, e, a, r.now()), nil
		}
	}
	return fencegate.Status{}, fencegate.Errorf(fencegate.CodeStatusInvalid, "the digest is not a current grant of lease %s", l.ID)
}
