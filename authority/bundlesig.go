package authority

import (
	"cmp"
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
// missed nothing but the last change can follow it at any time, and one
// further behind along the bundles kept with them (bundlechain.go).

// signedBundle is a bundle document as served and its signature.
type signedBundle struct {
	version uint64
	data    []byte
	sig     string
}

// sigEntry is one published version in the signature file: its signature,
// its document (the exact bytes served; absent in files written before the
// chain route) and the version in force when it was published (0: unknown,
// a bundle signed again at a start).
type sigEntry struct {
	Version   uint64 `json:"version"`
	Previous  uint64 `json:"previous,omitempty"`
	Signature string `json:"signature"`
	Document  string `json:"document,omitempty"`
}

// ChainLength is how many published bundles a signing authority keeps, with
// their signatures, in the signature file (the one in force and those
// before it): a replica that missed up to ChainLength changes follows them
// by GET /v1/trust-bundle/chain; one further behind narrows trust by what
// the registry's bundle revokes (narrow.go) until an operator installs it.
const ChainLength = 16

// sigFile is where the bundle signatures are kept.
func (a *Authority) sigFile() string {
	if a.files.BundleSignature != "" {
		return a.files.BundleSignature
	}
	return a.files.Bundle + ".sig"
}

// servedDocument is b's document as a signing authority serves it
// (GET /v1/trust-bundle and the chain): what Marshal writes, refused
// (INVALID_REQUEST, changing nothing) when it is longer than
// proofs.MaxBundleSize, the most a replica reads. Marshal can write more
// than the document b was parsed from (six bytes for each '<', '>', '&',
// U+2028, U+2029, and indentation), so an operator's upload that parses
// may still be one no replica could take. Every bundle published goes
// through here (seal), and so does the one in force at a start
// (openSignature): a registry never serves a bundle its replicas refuse.
func servedDocument(b *proofs.Bundle) ([]byte, error) {
	data, err := b.Marshal()
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInternal, "marshal trust bundle")
	}
	if err := proofs.CheckBundleSize(data); err != nil {
		return nil, fencegate.Errorf(fencegate.CodeInvalidRequest,
			"%s as the registry would serve version %d (%d bytes: '<', '>', '&', U+2028 and U+2029 written as six-byte escapes, and indented), which replicas refuse: publish a smaller bundle",
			fencegate.ErrorMessage(err), b.Version(), len(data))
	}
	return data, nil
}

// seal takes b's served document (servedDocument), signs it with signers
// and persists the signature; the caller holds a.change and writes the
// bundle file after. A document refused for its size changes nothing.
func (a *Authority) seal(b *proofs.Bundle, signers ...*proofs.Signer) (signedBundle, error) {
	data, err := servedDocument(b)
	if err != nil {
		return signedBundle{}, err
	}
	sig, err := proofs.SignBundle(data, b.Version(), signers...)
	if err != nil {
		return signedBundle{}, fencegate.Wrap(err, fencegate.CodeInternal, "sign trust bundle")
	}
	prev := a.verifier.Bundle().Version()
	if prev >= b.Version() {
		prev = 0 // the bundle in force signed again: what came before is not known
	}
	entries := slices.DeleteFunc(slices.Clone(a.sigs), func(e sigEntry) bool { return e.Version >= b.Version() })
	entries = append(entries, sigEntry{Version: b.Version(), Previous: prev, Signature: sig, Document: string(data)})
	if err := a.writeSignatures(entries); err != nil {
		a.unseal(b.Version()) // its rename may have landed
		return signedBundle{}, err
	}
	return signedBundle{version: b.Version(), data: data, sig: sig}, nil
}

// unseal drops what seal persisted for version when its publication failed
// and the bundle file on disk is not that version (its write failed before
// its rename, or was never made): a signed document that was never
// published must not lie where a replica could be handed it. A bundle file
// that did land (a failed directory sync after the rename) keeps its
// signature, which a restart serves. Best effort (Open drops it too).
func (a *Authority) unseal(version uint64) {
	if onDisk, err := proofs.LoadBundle(a.files.Bundle); err == nil && onDisk.Version() >= version {
		return
	}
	kept := slices.DeleteFunc(slices.Clone(a.sigs), func(e sigEntry) bool { return e.Version >= version })
	if len(kept) != len(a.sigs) {
		_ = a.writeSignatures(kept)
	}
}

// writeSignatures persists the last ChainLength of entries (oldest first)
// as the signature file, atomically, and keeps a.sigs in step with it: the
// entries written, or after a failure the entries the file held before,
// unless it now reads back as the entries written (the rename landed and a
// later step failed). A file that cannot be read after the failure (its
// directory gone) is taken to hold what it held: a.sigs is not emptied, so
// the chain is still answered and, once the directory is back, matches the
// file again.
func (a *Authority) writeSignatures(entries []sigEntry) error {
	if len(entries) > ChainLength {
		entries = entries[len(entries)-ChainLength:]
	}
	js, err := json.MarshalIndent(entries, "", "  ")
	if err == nil {
		err = WriteFileAtomic(a.sigFile(), js, 0o644)
	}
	if err != nil {
		if onDisk := readSignatures(a.sigFile()); slices.Equal(onDisk, entries) {
			a.sigs = onDisk
		}
		return fencegate.Wrap(err, fencegate.CodeInternal, "persist trust bundle signature")
	}
	a.sigs = entries
	return nil
}

// readSignatures reads the signature file, oldest first (none if it is
// missing or unreadable: Open signs the bundle in force again).
func readSignatures(path string) []sigEntry {
	var entries []sigEntry
	data, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(data, &entries) != nil {
		return nil
	}
	slices.SortFunc(entries, func(x, y sigEntry) int { return cmp.Compare(x.Version, y.Version) })
	return entries
}

// openSignature makes the signature of the bundle in force the one served:
// the persisted one if it verifies over the bundle's document under a key of
// the bundle, else (a first start of a registry that signs, a bundle file
// replaced by hand) a new one by the signing key, persisted. A bundle whose
// served document is too long (servedDocument) refuses the start, signed
// before or not: the registry would serve what no replica takes.
func (a *Authority) openSignature() error {
	b := a.verifier.Bundle()
	data, err := servedDocument(b)
	if err != nil {
		return err
	}
	a.sigs = readSignatures(a.sigFile())
	entries := a.sigs
	if n := len(entries); n > 0 && entries[n-1].Version > b.Version() {
		// Sealed for a publication whose bundle file was never written (a
		// crash between the two): never published, so not kept, signed
		// as it is by a key replicas trust.
		entries = slices.DeleteFunc(entries, func(e sigEntry) bool { return e.Version > b.Version() })
		if err := a.writeSignatures(entries); err != nil {
			return err
		}
	}
	for i, e := range entries {
		if e.Version != b.Version() {
			continue
		}
		if _, err := proofs.VerifyBundleSignature(b, data, e.Signature, b.Version(), a.now()); err == nil {
			if e.Document != string(data) {
				// Written before the file kept documents: keep it now, so
				// the chain can answer it.
				entries[i].Document = string(data)
				if err := a.writeSignatures(entries); err != nil {
					return err
				}
			}
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
// bytes (fencegate.BundleSignatureHeader), by the key that signed before the
// bundle's change and the one after. Without a signing key (a replica) the
// signature is "".
//
// A signing authority answers its served snapshot alone (document and
// signature set together under a.mu, after the verifier took the bundle):
// during a change it may be the version before, never a document without
// its signature.
func (a *Authority) SignedTrustBundle(context.Context) (data []byte, signature string, err error) {
	a.mu.RLock()
	sb := a.served
	a.mu.RUnlock()
	if a.signing && sb.data != nil {
		return slices.Clone(sb.data), sb.sig, nil
	}
	data, err = a.verifier.Bundle().Marshal()
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
