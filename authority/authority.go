// Package authority is the one owner of operator state: the registry's
// signing key and issuer epoch, the trust bundle, the policy generation, the
// revoked epochs, the enforcement modes in force and the fence floor. Every
// change goes through an Authority method, is persisted (in the data
// directory) before it is answered, and is read from there by everything
// else: the registry (as its registry.Authority), the acceptance point (as its
// gateway.Policy and *gateway.Modes) and the admin routes. The composition
// root only wires it.
//
// Guarantees, each pinned by a test in this package or e2e/:
//   - revocation is one-way and has no overlap: a revoked epoch's key leaves
//     the trust bundle in the same bundle version that revokes it, and the
//     revoked epochs travel in that bundle to registry-less replicas;
//   - rotation keeps the earlier keys trusted for the overlap window only;
//   - the trust bundle changes only through RotateKey, RetireEpoch,
//     SetTrustBundle, ReloadBundle and FollowBundle, never because a token
//     says so, and its version never goes down;
//   - each bundle a signing authority publishes is signed by the key that
//     signed before the change and the one after, and a replica installs a
//     bundle fetched from its registry only under a signature by a key of
//     the bundle in force there (a chain; bundlesig.go), or along the
//     registry's last ChainLength bundles, each step verified under the
//     one before (bundlechain.go); a fetched bundle it refuses still has
//     its revocations applied there, and nothing else (narrow.go);
//   - a start whose configured modes switch validation off (enforce to shadow,
//     a new shadow pattern, a removed enforce rule) against the modes in force
//     is refused unless break-glass is given, which is logged and counted;
//   - the policy generation never goes down.
//
// One signing Authority per coordination backend: two signing registries
// with their own files on one backend each rotate and revoke their own key,
// and neither bundle trusts the other's grants. Nothing enforces this at
// start (no backend-side claim of the key); the README (Several registries on
// one coordination backend) says how to deploy them: one signer, the others
// registry-less replicas, or one shared data directory.
package authority

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/s3cred"
)

// Files are where an Authority keeps its state.
type Files struct {
	// State is the operator state (JSON): epoch, key ID, policy generation,
	// revoked epochs, modes.
	State string
	// Bundle is the trust bundle file, the one replicas are given.
	Bundle string
	// Key holds the registry's Ed25519 signing seed (hex, mode 0600); only a
	// signing authority uses it.
	Key string
	// BundleSignature holds the last ChainLength bundles published, with
	// their signatures (bundlesig.go, bundlechain.go); only a signing
	// authority uses it. "" means Bundle + ".sig".
	BundleSignature string
	// S3Key holds the registry's S3 credential key (32 bytes, hex, mode
	// 0600; package s3cred), created on first start; only a signing
	// authority uses it. "": no S3 credentials are issued.
	S3Key string
}

// Alarm is told when break-glass switched validation off and when a trust
// bundle offered here is refused (BundleRefused).
type Alarm interface {
	// BreakGlass counts one use; source is "start" or "admin".
	BreakGlass(source string)
	// BundleRefused counts one refusal of a bundle offered here: source is
	// "registry" (a fetched one: FollowBundle; a document that does not
	// parse, or a newer one refused; once per offer, whether or not its
	// revocations could be applied) or "file" (ReloadBundle: a file
	// that does not load, or a newer one refused; once per reload). A
	// bundle not newer than the one in force is not checked and not
	// counted, nor is a failure to persist or install one that was
	// admitted, nor a registry chain that could not be fetched.
	BundleRefused(source string)
}

// Floors raises the fence floor (the registry).
type Floors interface {
	SetFloor(ctx context.Context, floor uint64) error
}

// Config opens an Authority. Zero values take the documented defaults.
type Config struct {
	Files Files
	// Signing is set when this process runs a registry: the authority then
	// holds its signing key (created on first start) and publishes the trust
	// bundle; otherwise it only trusts the bundle file it is given.
	Signing bool
	// KeyID and IssuerEpoch name the first signing key; after a rotation the
	// persisted ones win.
	KeyID       string
	IssuerEpoch uint64
	// PolicyGeneration is the lowest policy generation (the persisted one wins when higher).
	PolicyGeneration uint64
	// RevokedEpochs are revoked from the start, on top of the persisted ones.
	RevokedEpochs []uint64
	// Modes are the configured enforcement modes; operator changes apply over them.
	Modes []gateway.ModeRule
	// BreakGlass lets this start switch validation off against the modes in force.
	BreakGlass bool
	// Overlap is how long keys replaced by a rotation stay trusted (default 10 min).
	Overlap time.Duration
	// AcceptUnsignedBundles lets FollowBundle install a fetched bundle that
	// carries no signature at all (a registry older than bundle signatures,
	// during a rolling upgrade); a signature that does not verify is refused
	// all the same.
	AcceptUnsignedBundles bool
	// VerifierOptions configure the verifier built over the bundle.
	VerifierOptions []proofs.Option
	Now             func() time.Time
	Log             *slog.Logger
	Alarm           Alarm
}

// State is the operator state in force, as the admin routes answer it.
type State struct {
	IssuerEpoch        uint64   `json:"issuerEpoch,omitempty"`
	PolicyGeneration   uint64   `json:"policyGeneration"`
	RevokedEpochs      []uint64 `json:"revokedEpochs"`
	TrustBundleVersion uint64   `json:"trustBundleVersion"`
	KeyIDs             []string `json:"keyIds"`
	// Modes are the enforcement modes per resource pattern (enforce unless listed).
	Modes []gateway.ModeRule `json:"modes"`
	// Issuance is the in-process registry's issuing state: paused after a
	// coordination state loss, and the highest fence known (a safe floor is
	// at or above it). Absent without a registry.
	Issuance *registry.Issuance `json:"issuance,omitempty"`
}

// Authority owns the operator state. It is safe for concurrent use: changes
// are serialised and persisted; reads see one consistent snapshot.
type Authority struct {
	change sync.Mutex // held by every change, across its persistence

	files    Files
	signing  bool
	overlap  time.Duration
	now      func() time.Time
	log      *slog.Logger
	alarm    Alarm
	verifier *proofs.Verifier
	modes    *gateway.Modes
	s3       *s3cred.Deriver

	mu        sync.RWMutex // guards the fields below
	signer    *proofs.Signer
	epoch     uint64
	policyGen uint64
	revoked   map[uint64]bool // replaced, never modified, once published
	opModes   []gateway.ModeRule
	floors    Floors
	windows   []window // the bundle's keys by epoch and end of validity
	// served is the bundle in force as a signing authority serves it: its
	// document and signature (bundlesig.go).
	served signedBundle
	// sigs is what the signature file holds (oldest first; guarded by
	// change): read once by Open, kept in step by writeSignatures.
	sigs []sigEntry
	// otherWarned is the last fetched bundle of the version in force with
	// other content, warned of once (warnOtherOfVersion; guarded by
	// change).
	otherWarned *proofs.Bundle
	// acceptUnsigned is Config.AcceptUnsignedBundles.
	acceptUnsigned bool
}

// window is when a bundle key of epoch stops being valid (zero: never).
type window struct {
	epoch    uint64
	notAfter time.Time
}

var (
	_ gateway.Policy     = (*Authority)(nil)
	_ registry.Authority = (*Authority)(nil)
)

// S3 derives the secrets of leases' S3 credentials under the registry's
// credential key; nil unless this authority signs and has Files.S3Key.
func (a *Authority) S3() *s3cred.Deriver { return a.s3 }

// Verifier is the grant and status verifier over the bundle in force.
func (a *Authority) Verifier() *proofs.Verifier { return a.verifier }

// Modes are the enforcement modes in force (for the acceptance point).
func (a *Authority) Modes() *gateway.Modes { return a.modes }

// Signer is the current signing key, nil unless signing.
func (a *Authority) Signer() *proofs.Signer {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.signer
}

// ServeFloors makes SetFloor act on f (the registry, once it is built).
func (a *Authority) ServeFloors(f Floors) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.floors = f
}

// PolicyGeneration is the oldest policy generation a grant may carry
// (gateway.Policy) and the one new grants carry.
func (a *Authority) PolicyGeneration() uint64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.policyGen
}

// EpochRevoked reports whether grants and proofs of epoch are refused
// (gateway.Policy): revoked here, in the configuration, or by a trust bundle.
func (a *Authority) EpochRevoked(epoch uint64) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.revoked[epoch]
}

// CurrentEpoch is the issuer epoch new grants are signed for (0 unless signing).
func (a *Authority) CurrentEpoch() uint64 {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.epoch
}

// Issuing is the registry's view (registry.Authority): the signer, epoch,
// policy generation, revoked epochs and the earlier epochs still standing in
// a rotation's overlap window (their key is in the bundle and valid now).
func (a *Authority) Issuing() registry.Issuing {
	a.mu.RLock()
	defer a.mu.RUnlock()
	is := registry.Issuing{Epoch: a.epoch, PolicyGeneration: a.policyGen, Revoked: a.revoked}
	if a.signer != nil {
		is.Signer = a.signer
	}
	now := a.now()
	for _, k := range a.windows {
		if k.epoch != a.epoch && !a.revoked[k.epoch] && (k.notAfter.IsZero() || now.Before(k.notAfter)) &&
			!slices.Contains(is.Standing, k.epoch) {
			is.Standing = append(is.Standing, k.epoch)
		}
	}
	return is
}

// State returns the operator state in force.
func (a *Authority) State(context.Context) (State, error) { return a.state(), nil }

func (a *Authority) state() State {
	a.mu.RLock()
	st := State{IssuerEpoch: a.epoch, PolicyGeneration: a.policyGen,
		RevokedEpochs: slices.Sorted(maps.Keys(a.revoked))}
	f := a.floors
	a.mu.RUnlock()
	if r, ok := f.(interface{ Issuance() registry.Issuance }); ok {
		is := r.Issuance()
		st.Issuance = &is
	}
	if st.RevokedEpochs == nil {
		st.RevokedEpochs = []uint64{}
	}
	st.Modes = a.modes.Rules()
	if st.Modes == nil {
		st.Modes = []gateway.ModeRule{}
	}
	b := a.verifier.Bundle()
	st.TrustBundleVersion, st.KeyIDs = b.Version(), b.KeyIDs()
	return st
}

// BumpPolicy raises the policy generation by one: grants of older generations
// are POLICY_STALE from now on. The new generation is persisted before it is
// in force: a failed save changes nothing, so a restart never finds a lower
// generation than one that was handed out.
func (a *Authority) BumpPolicy(context.Context) (State, error) {
	a.change.Lock()
	defer a.change.Unlock()
	p := a.snapshot()
	p.PolicyGeneration++
	if err := a.write(p); err != nil {
		return State{}, err
	}
	a.mu.Lock()
	a.policyGen = p.PolicyGeneration
	a.mu.Unlock()
	return a.state(), nil
}

// SetFloor makes every later fence of every resource greater than floor (a
// floor below the current one changes nothing). The floor lives in the
// registry's coordination backend, next to the fences it bounds; the
// registry, which knows the highest fence, logs what the floor did
// (registry.SetFloor).
func (a *Authority) SetFloor(ctx context.Context, floor uint64) (State, error) {
	a.mu.RLock()
	f := a.floors
	a.mu.RUnlock()
	if f == nil {
		return State{}, fencegate.Errorf(fencegate.CodeUnsupported, "no in-process registry: set the floor at the registry")
	}
	if err := f.SetFloor(ctx, floor); err != nil {
		return State{}, err
	}
	return a.state(), nil
}

// saved persists the state and returns it; the caller holds a.change.
func (a *Authority) saved() (State, error) {
	if err := a.save(); err != nil {
		return State{}, err
	}
	return a.state(), nil
}
