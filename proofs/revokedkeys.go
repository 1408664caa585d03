package proofs

import (
	"crypto"
	"encoding/hex"
	"slices"
)

// A revocation names epochs and key IDs, and the key it ends leaves the
// bundle; nothing in a later bundle would then stop the same key material
// from coming back under a new key ID and epoch (tokens signed with it
// would claim the new epoch, which no revocation covers). So the Verifier
// remembers the RFC 7638 thumbprint of every key a bundle it installs
// revokes (by epoch or key ID), and refuses any later bundle that holds one
// of them; the caller persists them (RevokedKeys) and gives them back when
// it makes the Verifier again (WithRevokedKeys).

// WithRevokedKeys makes the Verifier refuse bundles holding any of the keys
// whose thumbprints are given (RevokedKeys of an earlier Verifier).
func WithRevokedKeys(prints []string) Option {
	return func(v *Verifier) {
		for _, p := range prints {
			v.revokedKeys[p] = true
		}
	}
}

// RevokedKeys are the thumbprints (hex SHA-256, RFC 7638) of every key a
// bundle installed here revoked, or WithRevokedKeys gave, sorted.
func (v *Verifier) RevokedKeys() []string {
	v.swap.Lock()
	defer v.swap.Unlock()
	out := make([]string, 0, len(v.revokedKeys))
	for p := range v.revokedKeys {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// thumbprint is k's RFC 7638 thumbprint, hex SHA-256 ("" if it cannot be
// computed, which a bundle's checked keys never are).
func (k *bundleKey) thumbprint() string {
	sum, err := k.jwk.Thumbprint(crypto.SHA256)
	if err != nil {
		return ""
	}
	return hex.EncodeToString(sum)
}

// revokedBy lists the thumbprints of cur's keys that b revokes (their
// epoch or key ID).
func revokedBy(cur, b *Bundle) []string {
	var out []string
	for _, kid := range cur.order {
		k := cur.keys[kid]
		if b.EpochRevoked(k.epoch) || b.KeyRevoked(kid) {
			if p := k.thumbprint(); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// keepsKeysRevoked is the part of admits about revoked keys: every key ID
// cur revokes stays revoked, and b holds no key revoked here before or by
// b itself (under any key ID).
func (v *Verifier) keepsKeysRevoked(cur, b *Bundle) error {
	for _, kid := range cur.revokedKids {
		if !b.KeyRevoked(kid) {
			return bundleErr("version %d lifts the revocation of key %s", b.Version(), kid)
		}
	}
	return v.trustsNoRevokedKey(b, revokedBy(cur, b))
}

// trustsNoRevokedKey refuses b if it holds a key revoked here before, or
// one of also (the keys b itself revokes, under another key ID).
func (v *Verifier) trustsNoRevokedKey(b *Bundle, also []string) error {
	for _, kid := range b.order {
		p := b.keys[kid].thumbprint()
		if v.revokedKeys[p] || slices.Contains(also, p) {
			return bundleErr("version %d trusts, as %s, a key that was revoked", b.Version(), kid)
		}
	}
	return nil
}
