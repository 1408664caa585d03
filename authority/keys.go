package authority

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/lestrrat-go/jwx/v2/jwa"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// RotateKey makes a new Ed25519 key for the next epoch sign everything from
// now on. The trust bundle (version + 1) holds it and the earlier keys, those
// valid for the overlap window only. Key and bundle are persisted before any
// grant is signed with the key. Leases keep their fences; asking for a
// lease's status re-issues its grant under the new epoch.
func (a *Authority) RotateKey(context.Context) (State, error) {
	a.change.Lock()
	defer a.change.Unlock()
	if a.signing {
		// Before a.revoked is read: a landed bundle it installs may revoke more.
		if err := a.noStoppedPublication(nil); err != nil {
			return State{}, err
		}
	}
	if err := a.rotateLocked(a.revoked); err != nil {
		return State{}, err
	}
	return a.saved()
}

// RetireEpoch retires issuer epoch n at once, the one path for "this epoch's
// key must no longer be trusted" (an operator's revocation, or a registry
// that detected the loss of its coordination state): n is revoked, its key
// dropped from the trust bundle in a new version that lists n as revoked
// (revocation has no overlap), and everything is persisted; if n is the
// epoch being signed for, that same version also holds a new key for the
// next epoch, which signs from then on (one version, so a failure leaves
// either both or neither, and never a signer moved on with n still
// trusted). From then on the registry states grants of n REVOKED and signs
// no proof for them, and this process refuses them; registry-less replicas
// refuse them once they load the new bundle, and in any case within one
// status-proof life. Without a signing key (a replica) it records the
// revocation locally, in the state file before memory. Retiring a revoked
// epoch again changes nothing but saves the state again, so a retry after a
// failed save is not answered before the revocation is on disk.
func (a *Authority) RetireEpoch(_ context.Context, n uint64) (State, error) {
	a.change.Lock()
	defer a.change.Unlock()
	if n == 0 {
		return State{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "epoch 0 does not exist")
	}
	if a.signing && n > a.epoch {
		return State{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "epoch %d has not been issued (the current epoch is %d)", n, a.epoch)
	}
	if a.signing {
		// A publication stopped after its bundle landed on disk: installed
		// first if this registry published it (it may revoke n already,
		// when it was this retirement's), refused otherwise.
		if err := a.noStoppedPublication(nil); err != nil {
			return State{}, err
		}
	}
	signingFor := a.signing && n == a.epoch
	if a.EpochRevoked(n) && !signingFor {
		return a.saved()
	}
	revoked := maps.Clone(a.revoked)
	revoked[n] = true
	switch {
	case signingFor:
		if err := a.rotateLocked(revoked); err != nil {
			return State{}, err
		}
	case a.signing:
		b := a.verifier.Bundle()
		if err := a.publishWith(revoked, b.Keys(), b.Version()+1, a.signer); err != nil {
			return State{}, err
		}
	default:
		if err := a.revokeHere(revoked); err != nil {
			return State{}, err
		}
	}
	a.mu.Lock()
	a.revoked = revoked
	a.mu.Unlock()
	a.log.Warn("issuer epoch retired: its grants and status proofs are refused", "epoch", n)
	if !a.signing {
		return a.state(), nil
	}
	return a.saved()
}

// rotateLocked is RotateKey's work, publishing the bundle with revoked as
// its revocations; the caller holds a.change. The new epoch is above every
// epoch the bundle holds a key of (a rotation that failed half-way may have
// published its epoch) and every revoked one (a bundle or the config may
// revoke an epoch not issued yet): a key is never made for a revoked epoch,
// which the bundle would drop at once. The caller has run
// noStoppedPublication.
func (a *Authority) rotateLocked(revoked map[uint64]bool) error {
	if !a.signing {
		return fencegate.Errorf(fencegate.CodeUnsupported, "no in-process registry: rotate keys at the registry and load its bundle here")
	}
	old := a.verifier.Bundle()
	epoch := a.epoch + 1
	for _, k := range old.Keys() {
		epoch = max(epoch, k.Epoch+1)
	}
	for e := range revoked {
		epoch = max(epoch, e+1)
	}
	seed, err := newSeed()
	if err != nil {
		return err
	}
	signer, err := proofs.NewSigner(ed25519.NewKeyFromSeed(seed), fmt.Sprintf("registry-%d", epoch), jwa.EdDSA)
	if err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "new signer")
	}
	until := a.now().Add(a.overlap)
	var keys []proofs.BundleKey
	for _, k := range old.Keys() {
		if k.NotAfter.IsZero() || k.NotAfter.After(until) {
			k.NotAfter = until
		}
		keys = append(keys, k)
	}
	keys = append(keys, signer.BundleKey(epoch))
	// The new key beside the old one first (nothing is published if it
	// cannot be written: a read-only key directory refuses the rotation
	// whole, instead of publishing a key whose private half is lost and
	// capping the one still signing); then the bundle; then the new key over
	// the old; then (the caller) the state. No grant is signed with the key
	// before all are written. Open completes a rotation that stopped after
	// the bundle (a next key the bundle trusts), and finds the new key in the
	// bundle when the state still names the old one.
	next := nextKeyFile(a.files.Key)
	if err := writeSeed(next, seed); err != nil {
		return err
	}
	// Signed by the outgoing key, which replicas still trust, and the new one.
	if err := a.publishWith(revoked, keys, old.Version()+1, a.signer, signer); err != nil {
		if !a.bundleFileTrusts(signer) {
			_ = os.Remove(next)
		}
		return err
	}
	if err := renameDurable(next, a.files.Key); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "persist signing key")
	}
	a.mu.Lock()
	a.signer, a.epoch = signer, epoch
	a.mu.Unlock()
	a.log.Info("signing key rotated", "epoch", epoch, "keyId", signer.KeyID(), "overlapUntil", until)
	return nil
}

// bundleFileTrusts reports whether the bundle file holds s's key: a write
// that failed after its rename (the directory's fsync) still published it.
func (a *Authority) bundleFileTrusts(s *proofs.Signer) bool {
	b, err := proofs.LoadBundle(a.files.Bundle)
	return err == nil && holdsSigner(b, s) == nil
}

// publish is publishWith the revocations in force, signed by the signing key.
func (a *Authority) publish(keys []proofs.BundleKey, version uint64) error {
	return a.publishWith(a.revoked, keys, version, a.signer)
}

// publishWith writes and installs a bundle of version holding keys, less
// those of revoked epochs and those expired, and listing revoked, signed by
// signers (the signature persisted before the bundle file).
func (a *Authority) publishWith(revoked map[uint64]bool, keys []proofs.BundleKey, version uint64, signers ...*proofs.Signer) error {
	now := a.now()
	var kept []proofs.BundleKey
	rv := proofs.Revocations{Epochs: revokedList(revoked), KeyIDs: a.verifier.Bundle().Revocations().KeyIDs}
	for _, k := range keys {
		switch {
		case revoked[k.Epoch]:
			rv.KeyIDs = append(rv.KeyIDs, k.Key.KeyID())
		case k.NotAfter.IsZero() || k.NotAfter.After(now):
			kept = append(kept, k)
		}
	}
	b, err := proofs.NewRevokingBundle(version, rv, kept...)
	if err != nil {
		return err
	}
	sb, err := a.seal(b, signers...)
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(a.files.Bundle, sb.data, 0o644); err != nil {
		a.unseal(b.Version())
		return fencegate.Wrap(err, fencegate.CodeInternal, "persist trust bundle")
	}
	return a.install(b, sb)
}

// install makes b the bundle in force, served as sb (a signing authority's
// document and signature; zero otherwise), and takes over its revocations.
func (a *Authority) install(b *proofs.Bundle, sb signedBundle) error {
	if err := a.verifier.SetBundle(b); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.served = sb
	a.windows = windowsOf(b)
	if len(b.RevokedEpochs()) > 0 {
		revoked := maps.Clone(a.revoked)
		for _, e := range b.RevokedEpochs() {
			revoked[e] = true
		}
		a.revoked = revoked
	}
	return nil
}

// TrustBundle is the trust bundle in force, as a document.
func (a *Authority) TrustBundle(context.Context) ([]byte, error) {
	return a.verifier.Bundle().Marshal()
}

// SetTrustBundle installs a bundle document (the controlled path besides
// rotation) and persists it as the bundle file first, unless that file
// (which may be shared) holds a version at least as new. It is refused if
// it does not parse, has a lower version, lifts a revocation, or (signing)
// lacks the registry's key, holds a key of a revoked epoch or would be
// served longer than proofs.MaxBundleSize (servedDocument); and while the
// bundle file holds a version above the one in force (signing: one this
// registry did not publish; a replica: a bundle of that version or
// above), unless it is that same bundle (noStoppedPublication). A refusal
// changes nothing, but for a bundle a signing registry published whose
// file landed without being put in force: that one is put in force first,
// as a restart would, and the upload checked against it. Its revoked
// epochs are revoked here from then on. The bundle in force uploaded again
// (proofs.(*Bundle).Equal) is an idempotent success answering the state:
// nothing is installed or signed again (a signing registry keeps serving
// its signature, and its chain, as published); only the bundle file is
// made durable (written if it holds a lower version or none, else its
// directory synced).
func (a *Authority) SetTrustBundle(_ context.Context, data []byte) (State, error) {
	a.change.Lock()
	defer a.change.Unlock()
	b, err := proofs.ParseBundle(data)
	if err != nil {
		return State{}, err
	}
	// Before the checks: a landed bundle it installs is what b is checked
	// against.
	if err := a.noStoppedPublication(b); err != nil {
		return State{}, err
	}
	if err := a.admissible(b); err != nil {
		return State{}, err
	}
	if err := a.persistThenInstall(b, data); err != nil {
		return State{}, err
	}
	return a.saved()
}

// persistThenInstall writes data (b's document) as the bundle file (or,
// when the file holds b itself or a higher version, syncs its directory) and
// then makes b the bundle in force: a bundle that could not be written is never
// in force (a restart would take it back, revocations and all), and one the
// verifier would refuse is never written (the file may be shared with the
// registry and other replicas). A file holding another bundle of b's
// version (an upload whose directory sync failed after the rename) refuses
// b (INTERNAL, naming the two, nothing changed), for every caller (an
// upload, a fetched bundle, a step of the chain): b in memory and the file's
// on disk would never meet, as the file is not replaced by a version as new
// and a restart installs the file's. The bundle in force itself (Equal)
// is only made durable: not installed or signed again. The caller holds
// a.change, so nothing else installs a bundle between the check and the
// install.
func (a *Authority) persistThenInstall(b *proofs.Bundle, data []byte) error {
	if err := a.verifier.Admits(b); err != nil {
		return err
	}
	// The file may be shared: never replace a version at least as new, and
	// install no other bundle of the file's version (a replica sharing the
	// file may have taken the file's; a restart here would, and neither
	// would ever take b, of no higher version).
	onDisk, lerr := proofs.LoadBundle(a.files.Bundle)
	if lerr == nil && onDisk.Version() == b.Version() && !onDisk.Equal(b) {
		return fencegate.Wrap(errFileHoldsOther, fencegate.CodeInternal, fmt.Sprintf(
			"trust bundle %s not installed: the trust bundle file holds another bundle of its version (%s), which only a higher version replaces; the bundle in force and the file are unchanged",
			bundleName(b), bundleName(onDisk)))
	}
	// The bundle in force uploaded again: nothing to install, and (signing)
	// not signed again, which would replace the signature served (by the
	// outgoing key too, after a rotation) with one by the signing key alone
	// and drop the version it was published over, breaking the chain to it
	// (TrustBundleChain). Only the file is made durable, as below, and the
	// signature file written back if it no longer holds what is served.
	again := b.Equal(a.verifier.Bundle()) && (!a.signing || a.served.version == b.Version() && a.served.data != nil)
	var sb signedBundle
	if !again {
		var err error
		if sb, err = a.sealIfSigning(b); err != nil {
			return err
		}
	}
	// A file kept is relied on as written (the state saved next records
	// b's version, and a start refuses a file below it): its directory is
	// synced, as the write that put it there may have failed at that step
	// (the same upload sent again after an INTERNAL).
	var err error
	if lerr != nil || onDisk.Version() < b.Version() {
		err = WriteFileAtomic(a.files.Bundle, data, 0o644)
	} else {
		err = syncDir(a.files.Bundle)
	}
	if err != nil {
		if sb.data != nil {
			a.unseal(b.Version())
		}
		return fencegate.Wrap(err, fencegate.CodeInternal, "persist trust bundle")
	}
	if again {
		// A signature file lost or damaged since is written back as
		// served, signing nothing again (a start would sign the bundle
		// with the signing key alone, losing the chain).
		if a.signing && !slices.Equal(readSignatures(a.sigFile()), a.sigs) {
			return a.writeSignatures(a.sigs)
		}
		return nil
	}
	return a.install(b, sb)
}

// errFileHoldsOther is under (errors.Is) persistThenInstall's refusal of a
// bundle whose version the bundle file holds another bundle of: follow
// applies a fetched one's revocations then, as for any refusal of it.
var errFileHoldsOther = errors.New("the bundle file holds another bundle of this version")

// sealIfSigning signs b with the signing key (which an admissible bundle
// holds, as did the one in force) when this authority signs.
func (a *Authority) sealIfSigning(b *proofs.Bundle) (signedBundle, error) {
	if !a.signing {
		return signedBundle{}, nil
	}
	return a.seal(b, a.signer)
}

// ReloadBundle installs the bundle file if its version is above the one in
// force (the path a replica's operator uses: replace the file), its
// directory synced first (a sync that fails is INTERNAL, not counted, and
// changes nothing). It reports whether it installed a new version; a file
// that is refused changes nothing (and is counted: Alarm.BundleRefused).
func (a *Authority) ReloadBundle() (installed bool, version uint64, err error) {
	b, err := proofs.LoadBundle(a.files.Bundle)
	if err != nil {
		a.alarm.BundleRefused("file")
		return false, 0, err
	}
	installed, why, err := a.offer(b, nil, "")
	if isRefusal(why, err) {
		a.alarm.BundleRefused("file")
	}
	return installed, b.Version(), err
}

// refusal is why offer refused a bundle: not at all (an error is then a
// failure to persist it), inadmissible, or off the chain (the signature),
// which a walk along the registry's chain may overcome; or, not counted as
// one, a fetched bundle of the version in force with other content
// (otherOfVersion): not taken, its revocations applied here by follow as
// for a refused one.
type refusal int

const (
	notRefused refusal = iota
	inadmissible
	offChain
	otherOfVersion
)

// offer installs b if it is newer; data, when set (a fetched document), must
// be signed by signature along the chain and is written as the bundle file.
func (a *Authority) offer(b *proofs.Bundle, data []byte, signature string) (installed bool, why refusal, err error) {
	a.change.Lock()
	defer a.change.Unlock()
	if cur := a.verifier.Bundle(); b.Version() <= cur.Version() {
		if data != nil && b.Version() == cur.Version() && !b.Equal(cur) {
			a.warnOtherOfVersion(b, cur)
			return false, otherOfVersion, nil
		}
		return false, notRefused, nil
	}
	if err := a.admissible(b); err != nil {
		return false, inadmissible, err
	}
	if data != nil {
		if err := a.checkChain(b, data, signature); err != nil {
			return false, offChain, err
		}
	}
	// Written before it is in force, as SetTrustBundle does. A reload
	// installs the file itself, its directory synced first, as
	// persistThenInstall syncs a file it keeps: the state saved next
	// records b's version, and a crash losing the file's rename (an
	// operator's mv, not yet synced) would leave a file below it, which
	// Open refuses. The state file's own sync does not cover it: the
	// app's trustBundle may lie outside its data directory.
	if data != nil {
		err = a.persistThenInstall(b, data)
	} else if err = syncDir(a.files.Bundle); err != nil {
		err = fencegate.Wrap(err, fencegate.CodeInternal, "persist trust bundle")
	} else {
		var sb signedBundle
		if sb, err = a.sealIfSigning(b); err == nil {
			err = a.install(b, sb)
		}
	}
	if err != nil {
		return false, notRefused, err
	}
	_, err = a.saved()
	return true, notRefused, err
}

// isRefusal reports whether offer's answer (why, err) is a refusal, which
// is counted (Alarm.BundleRefused): why says so (otherOfVersion does not:
// a bundle of the version in force is no fault), or the verifier's own
// admission at install refused it (INVALID_REQUEST: it lifts a revocation);
// a failure to persist or install an admitted bundle (INTERNAL) is no
// refusal.
func isRefusal(why refusal, err error) bool {
	return (why != notRefused && why != otherOfVersion) || fencegate.ErrorCode(err) == fencegate.CodeInvalidRequest
}

// admissible checks what a loaded bundle must satisfy beyond parsing.
func (a *Authority) admissible(b *proofs.Bundle) error {
	if a.signer != nil {
		if err := holdsSigner(b, a.signer); err != nil {
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "trust bundle: %v", err)
		}
	}
	for _, k := range b.Keys() {
		if a.EpochRevoked(k.Epoch) {
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "trust bundle: key %q signs for revoked epoch %d", k.Key.KeyID(), k.Epoch)
		}
	}
	return nil
}
