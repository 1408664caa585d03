package authority

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// The chain of trust bundles (README, Trust bundle chain): a signing
// authority signs every bundle it publishes with the key that signed before
// the change and the key that signs after it (one key unless a rotation
// moved it), so each bundle is signed by a key the previous one trusts; a
// replica installs a fetched bundle only under such a signature by a key of
// the bundle in force there. The signatures of a bundle are made when it is
// published, while the outgoing key is still held, and persisted beside the
// bundle (Files.BundleSignature) before the bundle file is written: the
// registry holds no private key but the current one, yet a replica that
// missed nothing but the last change can follow it at any time.

// signedBundle is a bundle document as served and its signature.
type signedBundle struct {
	version uint64
	data    []byte
	sig     string
}

// sigEntry is one version's signature in the signature file.
type sigEntry struct {
	Version   uint64 `json:"version"`
	Signature string `json:"signature"`
}

// keptSignatures is how many versions the signature file holds: the one in
// force and the one before, so that a publication that stopped between the
// signature file and the bundle file loses nothing.
const keptSignatures = 2

// sigFile is where the bundle signatures are kept.
func (a *Authority) sigFile() string {
	if a.files.BundleSignature != "" {
		return a.files.BundleSignature
	}
	return a.files.Bundle + ".sig"
}

// seal marshals b, signs the document with signers and persists the
// signature; the caller holds a.change and writes the bundle file after.
func (a *Authority) seal(b *proofs.Bundle, signers ...*proofs.Signer) (signedBundle, error) {
	data, err := b.Marshal()
	if err != nil {
		return signedBundle{}, fencegate.Wrap(err, fencegate.CodeInternal, "marshal trust bundle")
	}
	sig, err := proofs.SignBundle(data, b.Version(), signers...)
	if err != nil {
		return signedBundle{}, fencegate.Wrap(err, fencegate.CodeInternal, "sign trust bundle")
	}
	entries := readSignatures(a.sigFile())
	entries = slices.DeleteFunc(entries, func(e sigEntry) bool { return e.Version >= b.Version() })
	entries = append(entries, sigEntry{Version: b.Version(), Signature: sig})
	if len(entries) > keptSignatures {
		entries = entries[len(entries)-keptSignatures:]
	}
	js, err := json.MarshalIndent(entries, "", "  ")
	if err == nil {
		err = WriteFileAtomic(a.sigFile(), js, 0o644)
	}
	if err != nil {
		return signedBundle{}, fencegate.Wrap(err, fencegate.CodeInternal, "persist trust bundle signature")
	}
	return signedBundle{version: b.Version(), data: data, sig: sig}, nil
}

// readSignatures reads the signature file, oldest first (none if it is
// missing or unreadable: Open signs the bundle in force again).
func readSignatures(path string) []sigEntry {
	var entries []sigEntry
	data, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(data, &entries) != nil {
		return nil
	}
	slices.SortFunc(entries, func(x, y sigEntry) int { return cmpUint(x.Version, y.Version) })
	return entries
}

func cmpUint(x, y uint64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// openSignature makes the signature of the bundle in force the one served:
// the persisted one if it verifies over the bundle's document under a key of
// the bundle, else (a first start of a registry that signs, a bundle file
// replaced by hand) a new one by the signing key, persisted.
func (a *Authority) openSignature() error {
	b := a.verifier.Bundle()
	data, err := b.Marshal()
	if err != nil {
		return err
	}
	for _, e := range readSignatures(a.sigFile()) {
		if e.Version != b.Version() {
			continue
		}
		if _, err := proofs.VerifyBundleSignature(b, data, e.Signature, b.Version(), a.now()); err == nil {
			a.served = signedBundle{version: b.Version(), data: data, sig: e.Signature}
			return nil
		}
	}
	sb, err := a.seal(b, a.signer)
	if err != nil {
		return err
	}
	a.served = sb
	return nil
}

// SignedTrustBundle is the trust bundle in force as served to replicas
// (GET /v1/trust-bundle): its document and the signature over exactly those
// bytes (proofs.BundleSignatureHeader), by the key that signed before the
// bundle's change and the one after. Without a signing key (a replica) the
// signature is "".
func (a *Authority) SignedTrustBundle(context.Context) (data []byte, signature string, err error) {
	b := a.verifier.Bundle()
	a.mu.RLock()
	sb := a.served
	a.mu.RUnlock()
	if a.signing && sb.version == b.Version() {
		return slices.Clone(sb.data), sb.sig, nil
	}
	data, err = b.Marshal()
	return data, "", err
}

// checkChain refuses a fetched bundle b (document data) unless signature
// verifies under a key of the bundle in force here, of an epoch not revoked
// here; an unsigned one passes only with Config.AcceptUnsignedBundles. The
// caller holds a.change.
func (a *Authority) checkChain(b *proofs.Bundle, data []byte, signature string) error {
	cur := a.verifier.Bundle()
	var keys []proofs.BundleKey
	for _, k := range cur.Keys() {
		if !a.EpochRevoked(k.Epoch) {
			keys = append(keys, k)
		}
	}
	trusted, err := proofs.NewRevokingBundle(cur.Version(), cur.Revocations(), keys...)
	if err != nil {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "trust bundle: version %d: the bundle in force holds no key of an epoch not revoked here to verify its signature with", b.Version())
	}
	_, err = proofs.VerifyBundleSignature(trusted, data, signature, b.Version(), a.now())
	switch {
	case err == nil:
		return nil
	case errors.Is(err, proofs.ErrUnsignedBundle) && a.acceptUnsigned:
		a.log.Warn("installing an unsigned trust bundle from the registry (registryBundleUnsigned: accept): upgrade the registry, then remove the setting",
			"version", b.Version())
		return nil
	case errors.Is(err, proofs.ErrUnsignedBundle):
		return fencegate.Wrap(proofs.ErrUnsignedBundle, fencegate.CodeInvalidRequest, fmt.Sprintf(
			"trust bundle: version %d refused (a registry too old to sign, or a signature stripped on the way): upgrade the registry first, or set registryBundleUnsigned: accept for the rolling upgrade", b.Version()))
	}
	return fencegate.Errorf(fencegate.CodeInvalidRequest,
		"%s; if the registry rotated more than once since this replica's bundle (no key in common), an operator installs its current bundle here: replace the trust bundle file or PUT /v1/admin/trust-bundle",
		fencegate.ErrorMessage(err))
}
