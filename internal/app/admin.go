package app

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/registry"
)

// policy is the gateway's policy: the local floor of policy generations and
// revoked epochs, joined with the in-process registry's when there is one.
type policy struct {
	mu      sync.RWMutex
	minGen  uint64
	revoked map[uint64]bool
	reg     *registry.Registry
}

func (p *policy) PolicyGeneration() uint64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.reg != nil {
		return max(p.minGen, p.reg.PolicyGeneration())
	}
	return p.minGen
}

func (p *policy) EpochRevoked(e uint64) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.revoked[e] || (p.reg != nil && p.reg.EpochRevoked(e))
}

// persisted is the operator-changed state kept in the data directory.
type persisted struct {
	IssuerEpoch      uint64   `json:"issuerEpoch,omitempty"`
	KeyID            string   `json:"keyId,omitempty"`
	PolicyGeneration uint64   `json:"policyGeneration"`
	RevokedEpochs    []uint64 `json:"revokedEpochs"`
	// Modes are the enforcement modes an operator set.
	Modes []gateway.ModeRule `json:"modes,omitempty"`
}

func loadPersisted(path string) (persisted, bool, error) {
	var p persisted
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, false, nil
	}
	if err != nil {
		return p, false, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, false, fmt.Errorf("%s: %w", path, err)
	}
	return p, true, nil
}

// writeFileAtomic replaces path with data so readers see old or new, never half.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// admin carries out operator actions; every change is persisted before it
// is answered.
type admin struct {
	mu         sync.Mutex
	reg        *registry.Registry
	verifier   *proofs.Verifier
	policy     *policy
	statePath  string
	bundlePath string
	keyPath    string
	keyID      string
	overlap    time.Duration
	now        func() time.Time
	modes      *gateway.Modes
	// opModes are the rules operators set (persisted); config rules are not.
	opModes []gateway.ModeRule
}

var _ handlers.Admin = (*admin)(nil)

func (a *admin) state() handlers.AdminState {
	a.policy.mu.RLock()
	defer a.policy.mu.RUnlock()
	st := handlers.AdminState{PolicyGeneration: a.policy.minGen, RevokedEpochs: []uint64{}}
	for e := range a.policy.revoked {
		st.RevokedEpochs = append(st.RevokedEpochs, e)
	}
	if a.reg != nil {
		rs := a.reg.State()
		st.IssuerEpoch = rs.IssuerEpoch
		st.PolicyGeneration = max(st.PolicyGeneration, rs.PolicyGeneration)
		st.RevokedEpochs = append(st.RevokedEpochs, rs.RevokedEpochs...)
	}
	slices.Sort(st.RevokedEpochs)
	st.RevokedEpochs = slices.Compact(st.RevokedEpochs)
	st.Modes = []gateway.ModeRule{}
	if a.modes != nil {
		st.Modes = a.modes.Rules()
	}
	b := a.verifier.Bundle()
	st.TrustBundleVersion = b.Version()
	st.KeyIDs = b.KeyIDs()
	return st
}

// save persists the operator state; the caller holds a.mu.
func (a *admin) save() error {
	st := a.state()
	p := persisted{IssuerEpoch: st.IssuerEpoch, KeyID: a.keyID, PolicyGeneration: st.PolicyGeneration,
		RevokedEpochs: st.RevokedEpochs, Modes: a.opModes}
	data, _ := json.MarshalIndent(p, "", "  ")
	if err := writeFileAtomic(a.statePath, data, 0o600); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "persist operator state")
	}
	return nil
}

func (a *admin) State(context.Context) (handlers.AdminState, error) { return a.state(), nil }

func (a *admin) RevokeEpoch(ctx context.Context, epoch uint64) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if epoch == 0 {
		return handlers.AdminState{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "epoch 0 does not exist")
	}
	if a.reg != nil && epoch == a.reg.IssuerEpoch() {
		// The registry must not keep signing for a revoked epoch: move to a new key first.
		if err := a.rotateLocked(); err != nil {
			return handlers.AdminState{}, err
		}
	}
	if a.reg != nil && epoch < a.reg.IssuerEpoch() {
		if err := a.reg.RevokeEpoch(epoch); err != nil {
			return handlers.AdminState{}, err
		}
	}
	a.policy.mu.Lock()
	a.policy.revoked[epoch] = true
	a.policy.mu.Unlock()
	return a.state(), a.save()
}

func (a *admin) RotateKey(context.Context) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.rotateLocked(); err != nil {
		return handlers.AdminState{}, err
	}
	return a.state(), a.save()
}

// rotateLocked makes a new Ed25519 key for the next epoch, publishes a trust
// bundle (version + 1) holding it and the earlier keys, the earlier ones
// valid for the overlap window only, and hands the key to the registry.
func (a *admin) rotateLocked() error {
	if a.reg == nil {
		return fencegate.Errorf(fencegate.CodeUnsupported, "no in-process registry: rotate keys at the registry and load its bundle here")
	}
	epoch := a.reg.IssuerEpoch() + 1
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "generate key")
	}
	kid := fmt.Sprintf("registry-%d", epoch)
	signer, err := proofs.NewSigner(ed25519.NewKeyFromSeed(seed), kid, jwa.EdDSA)
	if err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "new signer")
	}
	old := a.verifier.Bundle()
	until := a.now().Add(a.overlap)
	var keys []proofs.BundleKey
	for _, k := range old.Keys() {
		if k.NotAfter.IsZero() || k.NotAfter.After(until) {
			k.NotAfter = until
		}
		if k.NotAfter.After(a.now()) {
			keys = append(keys, k)
		}
	}
	keys = append(keys, signer.BundleKey(epoch))
	nb, err := proofs.NewBundle(old.Version()+1, keys...)
	if err != nil {
		return err
	}
	data, err := nb.Marshal()
	if err != nil {
		return err
	}
	// Persist key and bundle before anyone can see grants signed by the key.
	if err := writeFileAtomic(a.keyPath, []byte(hex.EncodeToString(seed)+"\n"), 0o600); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "persist signing key")
	}
	if err := writeFileAtomic(a.bundlePath, data, 0o644); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "persist trust bundle")
	}
	if err := a.verifier.SetBundle(nb); err != nil {
		return err
	}
	a.keyID = kid
	return a.reg.Rotate(signer, epoch)
}

func (a *admin) SetFloor(ctx context.Context, floor uint64) (handlers.AdminState, error) {
	if a.reg == nil {
		return handlers.AdminState{}, fencegate.Errorf(fencegate.CodeUnsupported, "no in-process registry")
	}
	if err := a.reg.SetFloor(ctx, floor); err != nil {
		return handlers.AdminState{}, err
	}
	return a.state(), nil
}

func (a *admin) BumpPolicy(context.Context) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reg != nil {
		gen := a.reg.BumpPolicy()
		a.policy.mu.Lock()
		a.policy.minGen = max(a.policy.minGen, gen)
		a.policy.mu.Unlock()
	} else {
		a.policy.mu.Lock()
		a.policy.minGen++
		a.policy.mu.Unlock()
	}
	return a.state(), a.save()
}

func (a *admin) SetMode(_ context.Context, rule gateway.ModeRule, breakGlass bool) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.modes.Set(rule.Pattern, rule.Mode, breakGlass); err != nil {
		return handlers.AdminState{}, err
	}
	a.opModes = slices.DeleteFunc(a.opModes, func(r gateway.ModeRule) bool { return r.Pattern == rule.Pattern })
	a.opModes = append(a.opModes, rule)
	return a.state(), a.save()
}

func (a *admin) TrustBundle(context.Context) ([]byte, error) { return a.verifier.Bundle().Marshal() }

func (a *admin) SetTrustBundle(_ context.Context, data []byte) (handlers.AdminState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, err := proofs.ParseBundle(data)
	if err != nil {
		return handlers.AdminState{}, err
	}
	if a.reg != nil {
		if _, ok := b.Key(a.keyID); !ok {
			return handlers.AdminState{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "the bundle lacks the registry's signing key %q", a.keyID)
		}
	}
	if err := a.verifier.SetBundle(b); err != nil {
		return handlers.AdminState{}, err
	}
	if err := writeFileAtomic(a.bundlePath, data, 0o644); err != nil {
		return handlers.AdminState{}, fencegate.Wrap(err, fencegate.CodeInternal, "persist trust bundle")
	}
	return a.state(), nil
}

// statePaths are where operator state lives in the data directory.
func statePaths(dataDir string) (state, bundle, key string) {
	return filepath.Join(dataDir, "authority.json"), filepath.Join(dataDir, "trust-bundle.json"),
		filepath.Join(dataDir, "registry-signing-key")
}
