package authority

import (
	"maps"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// Narrowing (README, Trust bundle chain): a fetched bundle that is refused
// (no signature by a key in force here, unsigned and not accepted, or not
// admissible) still carries what it revokes, and a replica that missed
// changes must not go on trusting an epoch its registry revoked (a revoked
// epoch is refused everywhere within one status-proof life). So what in it
// only narrows trust is applied: every issuer epoch it revokes that a key
// in force here signs for and that is not revoked here becomes a local
// revocation, persisted in the State file before it is in force, as an
// operator's revocation at a replica is (RetireEpoch). Nothing else in the
// bundle is taken: no key, no version, no window, and no revocation of an
// epoch no key here signs for (that would trust nothing less today, but
// would refuse for good the registry's later bundles bringing that epoch's
// key, the operator's too), nor of a key ID alone (its epoch's other keys
// would go with it). The bundle file and version are left as they are, so
// the registry's bundle, which revokes the same epochs, installs over it
// later: by an operator, or by the chain where its steps are signed by
// keys of epochs not narrowed here (a narrowed epoch's key no longer
// vouches). The endpoint answering registryURL can so make a replica
// refuse an epoch it trusts (a denial of service); refusing is the
// fail-safe side, and it can never make the replica trust a key.

// narrowBy revokes here what the refused fetched bundle b revokes beyond
// the revocations in force: the epochs it lists that a key in force here
// signs for. It reports the epochs it revoked (none if
// nothing was new, if this authority signs, or if the State file could not
// be written, in which case nothing changed and the next fetch tries
// again). The caller holds a.change.
func (a *Authority) narrowBy(b *proofs.Bundle) ([]uint64, error) {
	if a.signing {
		return nil, nil
	}
	a.mu.RLock()
	revoked := maps.Clone(a.revoked)
	a.mu.RUnlock()
	var added []uint64
	add := func(e uint64) {
		if e != 0 && !revoked[e] {
			revoked[e] = true
			added = append(added, e)
		}
	}
	inForce := map[uint64]bool{}
	for _, k := range a.verifier.Bundle().Keys() {
		inForce[k.Epoch] = true
	}
	for _, e := range b.RevokedEpochs() {
		if inForce[e] {
			add(e)
		}
	}
	if len(added) == 0 {
		return nil, nil
	}
	if err := a.revokeHere(revoked); err != nil {
		return nil, err
	}
	return added, nil
}

// revokeHere makes revoked this replica's revocations: written to the State
// file first, then in force (an operator's revocation at a replica, and a
// refused bundle's narrowing). The caller holds a.change.
func (a *Authority) revokeHere(revoked map[uint64]bool) error {
	p := a.snapshot()
	p.RevokedEpochs = revokedList(revoked)
	if err := a.write(p); err != nil {
		return err
	}
	a.mu.Lock()
	a.revoked = revoked
	a.mu.Unlock()
	return nil
}

// refuseFetched is the answer to a fetched bundle b that was refused with
// err (nil: not taken without a refusal, a bundle of the version in force
// with other content): what b revokes is applied here (narrowBy), logged as
// an error once (a later fetch of it finds nothing new), and err is
// answered.
func (a *Authority) refuseFetched(b *proofs.Bundle, err error) error {
	a.change.Lock()
	defer a.change.Unlock()
	added, werr := a.narrowBy(b)
	switch {
	case werr != nil:
		a.log.Error("trust bundle from the registry refused; its revocations could not be applied here (the next fetch tries again)",
			"version", b.Version(), "revokedEpochs", b.RevokedEpochs(), "err", werr)
		// INTERNAL, not the refusal: the fetch is tried again at once
		// (the puller backs off only from a refusal or a chain not
		// fetched), until it is applied.
		msg := "trust bundle refused; applying its revocations here failed"
		if err != nil {
			msg += ": " + fencegate.ErrorMessage(err)
		}
		return fencegate.Wrap(werr, fencegate.CodeInternal, msg)
	case len(added) > 0:
		a.log.Error("trust bundle from the registry refused, its revocations applied here: an operator must install the registry's bundle (replace the trust bundle file or PUT /v1/admin/trust-bundle)",
			"version", b.Version(), "inForce", a.verifier.Bundle().Version(), "revokedEpochs", added, "err", err)
	}
	return err
}
