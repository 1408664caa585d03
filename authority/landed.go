package authority

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// A publication can stop after its bundle file landed: the rename was made
// and a later step failed (the directory's sync), so the file holds a
// version above the one in force, which a replica sharing the file may have
// taken already, and which a restart installs. Another bundle of that
// version published over it would never reach that replica (it takes only
// a higher version), and a higher one would be checked against a bundle in
// force that is not the file's (it could lift what the file's revokes).
// This file holds the rules for publishing while the file is so above.

// noStoppedPublication runs before a signing authority publishes a bundle (a
// rotation or a retirement: upload nil; or an operator's upload) while the
// bundle file holds a version above the one in force. A bundle this
// authority published there itself (ownLanded: its signature file holds its
// signature of exactly that document) is put in force first, as a restart
// would (installLanded), and the publication goes on from it, if a restart
// would start on it (admissible: the signing key in it, as openBundle
// requires; otherwise refused, INTERNAL, as a restart is: a retirement of
// the signing epoch whose next key file is gone). Otherwise
// (written by another process or by hand) it refuses (INTERNAL), unless
// upload is that same bundle, which is then put in force as uploaded; its
// message names the ways out without promising one: a restart or that
// upload where they can take the file, else replacing it. It
// also refuses while a rotation's next key is trusted by the bundle file
// (noStoppedRotation), which only Open completes.
//
// At a replica (not signing; an upload) it refuses (INTERNAL) a bundle
// other than the file's of the file's version or above while the file is
// above the version in force (an upload here whose directory's sync
// failed, or the file replaced) and holds a bundle this replica would take
// (wouldTake; so a reload of the file installs it): installed here while
// the file keeps another of its version, the two would never meet
// (SetTrustBundle writes no version over one as new), and a higher one
// would be checked against a bundle in force that is not the file's. One
// below the file's version is installed here alone, as before; the file's
// own bundle installs it. A file this replica would not take (refused by a
// reload: it lifts a revocation in force, say one an upload below its
// version made) is treated as any refused file: it stops nothing, and an
// upload of a higher version replaces it (one of its version does not:
// persistThenInstall).
func (a *Authority) noStoppedPublication(upload *proofs.Bundle) error {
	onDisk, err := proofs.LoadBundle(a.files.Bundle)
	if err != nil {
		return nil
	}
	if a.signing {
		if err := a.noStoppedRotation(onDisk); err != nil {
			return err
		}
	}
	inForce := a.verifier.Bundle().Version()
	if onDisk.Version() <= inForce || upload.Equal(onDisk) {
		return nil
	}
	if !a.signing {
		if upload.Version() < onDisk.Version() || a.wouldTake(onDisk) != nil {
			return nil
		}
		return fencegate.Errorf(fencegate.CodeInternal,
			"the trust bundle file holds version %d, above version %d in force (an upload here that stopped after writing it, or the file replaced): the next reload of the file or a restart installs it, and so does an upload of that same bundle; no other upload of version %d or above is installed over it",
			onDisk.Version(), inForce, onDisk.Version())
	}
	if sb, ok := a.ownLanded(onDisk); ok {
		// The signing key in it, as Open requires of the file
		// (openBundle), and no key of an epoch revoked here.
		if err := a.admissible(onDisk); err != nil {
			return fencegate.Errorf(fencegate.CodeInternal,
				"the trust bundle file holds version %d, above version %d in force, published here by a publication that stopped after writing it, but it is not admissible (%s; a restart refuses a file lacking the signing key too): put back the key it trusts (a rotation's next key file, %s) and restart (putting back the bundle in force instead would have this registry publish another bundle of version %[1]d, which replicas that took the file's never install); nothing is published over it",
				onDisk.Version(), inForce, fencegate.ErrorMessage(err), nextKeyFile(a.files.Key))
		}
		return a.installLanded(onDisk, sb)
	}
	return fencegate.Errorf(fencegate.CodeInternal,
		"the trust bundle file holds version %d, above version %d in force, and this registry did not publish it (a file written by another process or by hand): a restart installs it if it can (a start refuses a file it cannot take, saying why), and so does an upload of that same bundle (the file's content) through PUT /v1/admin/trust-bundle if the bundle in force admits it; otherwise replace the file and restart; nothing else is published over it",
		onDisk.Version(), inForce)
}

// wouldTake reports why a reload of b, the bundle file's, would refuse it
// (offer: admissible, then the verifier's admission at install), or nil
// if it would install it.
func (a *Authority) wouldTake(b *proofs.Bundle) error {
	if err := a.admissible(b); err != nil {
		return err
	}
	return a.verifier.Admits(b)
}

// ownLanded reports whether b, the bundle file's, is a bundle this
// authority published and whose publication stopped after its file landed:
// the signature file (a.sigs) holds a signature of b's version over exactly
// b's served document, and it verifies under the bundle in force (the one
// it was published over). It answers b as served, with that signature.
func (a *Authority) ownLanded(b *proofs.Bundle) (signedBundle, bool) {
	data, err := b.Marshal()
	if err != nil {
		return signedBundle{}, false
	}
	for _, e := range a.sigs {
		if e.Version != b.Version() || e.Document != string(data) {
			continue
		}
		if _, err := proofs.VerifyBundleSignature(a.verifier.Bundle(), data, e.Signature, b.Version(), a.now()); err != nil {
			return signedBundle{}, false
		}
		return signedBundle{version: b.Version(), data: data, sig: e.Signature}, true
	}
	return signedBundle{}, false
}

// installLanded puts b, the bundle file's, in force served as sb, after
// syncing the file's directory (the step whose failure stopped its
// publication): what a restart would install, durably there before it is
// in force. The caller holds a.change; the state is saved by the
// publication that goes on.
func (a *Authority) installLanded(b *proofs.Bundle, sb signedBundle) error {
	if err := syncDir(a.files.Bundle); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "persist trust bundle")
	}
	if err := a.install(b, sb); err != nil {
		return err
	}
	a.log.Warn("installed the trust bundle file published here by a publication that stopped after writing it", "version", b.Version())
	return nil
}

// bundleName names b in a message: its version, the epochs it revokes and
// the SHA-256 of its document (two bundles of one version told apart).
func bundleName(b *proofs.Bundle) string {
	data, err := b.Marshal()
	if err != nil {
		return fmt.Sprintf("version %d", b.Version())
	}
	sum := sha256.Sum256(data)
	return fmt.Sprintf("version %d revoking epochs %v, sha256 %x", b.Version(), b.RevokedEpochs(), sum[:8])
}

// noStoppedRotation refuses a rotation while an earlier one in this process
// stopped after its bundle file (b, as read) trusted its new key (its next
// key file is kept): Open completes that one (completeRotation), and a
// second rotation here would publish another bundle of the same version
// over it.
func (a *Authority) noStoppedRotation(b *proofs.Bundle) error {
	seed, err := readSeed(nextKeyFile(a.files.Key))
	if err != nil {
		return nil
	}
	for _, k := range b.Keys() {
		if s, err := proofs.NewSigner(ed25519.NewKeyFromSeed(seed), k.Key.KeyID(), k.Alg); err == nil && k.Epoch > a.epoch && holdsSigner(b, s) == nil {
			return fencegate.Errorf(fencegate.CodeInternal, "a key rotation stopped after its bundle file trusted key %s; restart to complete it", k.Key.KeyID())
		}
	}
	return nil
}
