package authority

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"

	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/s3cred"
)

// DefaultOverlap is how long keys replaced by a rotation stay trusted unless configured.
const DefaultOverlap = 10 * time.Minute

// Open loads the persisted operator state over cfg and returns the
// Authority, with its state saved back (so the modes in force are recorded
// from the first start on). A signing authority creates its key and a trust
// bundle holding it on first start, and refuses a bundle that holds another
// key under its key ID. Open refuses, listing every downgrade, a start whose
// configured modes switch validation off against the modes in force, unless
// cfg.BreakGlass.
func Open(cfg Config) (*Authority, error) {
	if cfg.Overlap <= 0 {
		cfg.Overlap = DefaultOverlap
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Alarm == nil {
		cfg.Alarm = noAlarm{}
	}
	p, err := loadPersisted(cfg.Files.State)
	if err != nil {
		return nil, err
	}
	a := &Authority{files: cfg.Files, signing: cfg.Signing, overlap: cfg.Overlap, now: cfg.Now, log: cfg.Log,
		alarm: cfg.Alarm, acceptUnsigned: cfg.AcceptUnsignedBundles, policyGen: max(cfg.PolicyGeneration, p.PolicyGeneration, 1), revoked: map[uint64]bool{}}
	for _, e := range slices.Concat(cfg.RevokedEpochs, p.RevokedEpochs) {
		if e != 0 {
			a.revoked[e] = true
		}
	}
	// Modes first: a start they refuse writes nothing.
	if err := a.openModes(cfg, p); err != nil {
		return nil, err
	}
	if cfg.Signing {
		if err := a.openSigner(cfg, p); err != nil {
			return nil, err
		}
		if cfg.Files.S3Key != "" {
			key, err := loadOrCreateSeed(cfg.Files.S3Key)
			if err != nil {
				return nil, fmt.Errorf("S3 credential key: %w", err)
			}
			if a.s3, err = s3cred.NewDeriver(key); err != nil {
				return nil, err
			}
		}
	}
	b, err := a.openBundle()
	if err != nil {
		return nil, fmt.Errorf("trust bundle %s: %w", cfg.Files.Bundle, err)
	}
	if b.Version() < p.BundleVersion {
		// An older copy replaced the file while the process was down (a
		// rollback of the file alone): taking it would trust again, with
		// no end, keys a later bundle had given an end.
		return nil, fmt.Errorf("trust bundle %s is version %d, below version %d, which was in force here (%s): put the current bundle back (a replica can fetch its registry's GET /v1/trust-bundle)",
			cfg.Files.Bundle, b.Version(), p.BundleVersion, cfg.Files.State)
	}
	for _, e := range b.RevokedEpochs() {
		a.revoked[e] = true
	}
	opts := append(slices.Clone(cfg.VerifierOptions), proofs.WithRevokedKeys(p.RevokedKeys))
	if a.verifier, err = proofs.NewVerifier(b, opts...); err != nil {
		return nil, err
	}
	a.windows = windowsOf(b)
	if cfg.Signing && !revokesAll(b, a.revoked) {
		// A revocation recorded before bundles carried them (or in the
		// config): publish it, dropping the revoked keys at once.
		if err := a.publish(b.Keys(), b.Version()+1); err != nil {
			return nil, err
		}
	}
	if cfg.Signing && a.served.version != a.verifier.Bundle().Version() {
		if err := a.openSignature(); err != nil {
			return nil, fmt.Errorf("trust bundle signature %s: %w", a.sigFile(), err)
		}
	}
	if err := a.save(); err != nil {
		return nil, err
	}
	return a, nil
}

// openSigner loads (or creates) the signing key for the persisted epoch and
// key ID, or the configured ones before any rotation.
func (a *Authority) openSigner(cfg Config, p persisted) error {
	seed, err := loadOrCreateSeed(cfg.Files.Key)
	if err != nil {
		return err
	}
	epoch, kid := cfg.IssuerEpoch, cfg.KeyID
	if kid == "" {
		kid = "registry-1"
	}
	if epoch == 0 {
		epoch = 1
	}
	if p.IssuerEpoch > 0 {
		epoch, kid = p.IssuerEpoch, p.KeyID
	}
	if a.revoked[epoch] {
		return fmt.Errorf("the signing epoch %d is revoked: retire it (rotate) before revoking it", epoch)
	}
	a.signer, err = proofs.NewSigner(ed25519.NewKeyFromSeed(seed), kid, jwa.EdDSA)
	a.epoch = epoch
	return err
}

// openBundle loads the bundle file; a signing authority with no file yet
// writes one holding its key, and its key must be in the bundle.
func (a *Authority) openBundle() (*proofs.Bundle, error) {
	b, err := proofs.LoadBundle(a.files.Bundle)
	if errors.Is(err, os.ErrNotExist) && a.signer != nil {
		b, err = proofs.NewRevokingBundle(1, proofs.Revocations{Epochs: revokedList(a.revoked)}, a.signer.BundleKey(a.epoch))
		if err == nil {
			err = writeBundle(a.files.Bundle, b)
		}
	}
	if err != nil {
		return nil, err
	}
	if a.signer != nil {
		if err := a.completeRotation(b); err != nil {
			return nil, err
		}
	}
	if a.signer != nil && holdsSigner(b, a.signer) != nil {
		a.resumeRotation(b)
	}
	if a.signer != nil {
		if err := holdsSigner(b, a.signer); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// nextKeyFile is where a rotation writes its new key before publishing it.
func nextKeyFile(key string) string { return key + ".next" }

// completeRotation finishes a rotation that stopped between publishing its
// bundle and moving its new key over the old: a next key that b trusts under
// an epoch above the signing one becomes the key file and the signer. A next
// key b does not trust was never published and is removed.
func (a *Authority) completeRotation(b *proofs.Bundle) error {
	next := nextKeyFile(a.files.Key)
	seed, err := readSeed(next)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range b.Keys() {
		if k.Epoch <= a.epoch {
			continue
		}
		s, err := proofs.NewSigner(ed25519.NewKeyFromSeed(seed), k.Key.KeyID(), k.Alg)
		if err != nil || holdsSigner(b, s) != nil {
			continue
		}
		if err := renameDurable(next, a.files.Key); err != nil {
			return fmt.Errorf("signing key: %w", err)
		}
		a.log.Warn("completing a key rotation that stopped after publishing its bundle", "epoch", k.Epoch, "keyId", k.Key.KeyID())
		a.signer, a.epoch = s, k.Epoch
		return nil
	}
	return os.Remove(next)
}

// resumeRotation adopts the key ID and epoch that b holds for the signing
// key, when they are above the persisted epoch: a rotation wrote bundle and
// key but stopped before it saved the state.
func (a *Authority) resumeRotation(b *proofs.Bundle) {
	want, err := a.signer.PublicKey().Thumbprint(crypto.SHA256)
	if err != nil {
		return
	}
	for _, k := range b.Keys() {
		got, err := k.Key.Thumbprint(crypto.SHA256)
		if err != nil || k.Epoch <= a.epoch || !bytes.Equal(want, got) {
			continue
		}
		seed, err := loadOrCreateSeed(a.files.Key) // exists: the signer was made from it
		if err != nil {
			return
		}
		s, err := proofs.NewSigner(ed25519.NewKeyFromSeed(seed), k.Key.KeyID(), k.Alg)
		if err != nil {
			return
		}
		a.log.Warn("resuming a key rotation that stopped before its state was saved", "epoch", k.Epoch, "keyId", k.Key.KeyID())
		a.signer, a.epoch = s, k.Epoch
		return
	}
}

// holdsSigner checks that b trusts s's key under s's key ID.
func holdsSigner(b *proofs.Bundle, s *proofs.Signer) error {
	k, ok := b.Key(s.KeyID())
	if !ok {
		return fmt.Errorf("the bundle lacks the registry's signing key %q", s.KeyID())
	}
	want, err1 := s.PublicKey().Thumbprint(crypto.SHA256)
	got, err2 := k.Key.Thumbprint(crypto.SHA256)
	if err1 != nil || err2 != nil || !bytes.Equal(want, got) {
		return fmt.Errorf("the bundle holds another key under the registry's key ID %q", s.KeyID())
	}
	return nil
}

// revokesAll reports whether b lists every epoch of revoked (and so holds none of their keys).
func revokesAll(b *proofs.Bundle, revoked map[uint64]bool) bool {
	for e := range revoked {
		if !b.EpochRevoked(e) {
			return false
		}
	}
	return true
}

func revokedList(revoked map[uint64]bool) []uint64 {
	out := make([]uint64, 0, len(revoked))
	for e := range revoked {
		out = append(out, e)
	}
	slices.Sort(out)
	return out
}

func windowsOf(b *proofs.Bundle) []window {
	var out []window
	for _, k := range b.Keys() {
		out = append(out, window{epoch: k.Epoch, notAfter: k.NotAfter})
	}
	return out
}

func writeBundle(path string, b *proofs.Bundle) error {
	data, err := b.Marshal()
	if err == nil {
		err = WriteFileAtomic(path, data, 0o644)
	}
	return err
}

type noAlarm struct{}

func (noAlarm) BreakGlass(string)    {}
func (noAlarm) BundleRefused(string) {}
