package authority

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// persisted is the State file. Older files wrote the operator's modes as
// "modes" and had no modesInForce; they are read as such.
type persisted struct {
	IssuerEpoch      uint64   `json:"issuerEpoch,omitempty"`
	KeyID            string   `json:"keyId,omitempty"`
	PolicyGeneration uint64   `json:"policyGeneration"`
	RevokedEpochs    []uint64 `json:"revokedEpochs"`
	// BundleVersion is the trust bundle version in force when last saved
	// (0 in files written before it was recorded): a start whose bundle
	// file holds a lower one is refused (Open).
	BundleVersion uint64 `json:"bundleVersion,omitempty"`
	// RevokedKeys are the thumbprints of keys revoked here (proofs,
	// Verifier.RevokedKeys): no later bundle may trust them again.
	RevokedKeys []string `json:"revokedKeys,omitempty"`
	// OperatorModes are the rules set through the admin API; they apply over the config's.
	OperatorModes []gateway.ModeRule `json:"operatorModes,omitempty"`
	// LegacyModes is the "modes" member of files written before operatorModes.
	LegacyModes []gateway.ModeRule `json:"modes,omitempty"`
	// ModesInForce are all the rules in force when last saved; nil when
	// never recorded (a first start takes the config's as they are).
	ModesInForce *[]gateway.ModeRule `json:"modesInForce,omitempty"`
}

func loadPersisted(path string) (persisted, error) {
	var p persisted
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%s: %w", path, err)
	}
	if p.OperatorModes == nil {
		p.OperatorModes = p.LegacyModes
	}
	p.LegacyModes = nil
	return p, nil
}

// save writes the State file; the caller holds a.change.
func (a *Authority) save() error { return a.write(a.snapshot()) }

// snapshot is the State file's content for the state in memory.
func (a *Authority) snapshot() persisted {
	a.mu.RLock()
	p := persisted{IssuerEpoch: a.epoch, PolicyGeneration: a.policyGen, OperatorModes: slices.Clone(a.opModes)}
	if a.signer != nil {
		p.KeyID = a.signer.KeyID()
	}
	if a.verifier != nil {
		p.BundleVersion = a.verifier.Bundle().Version()
		p.RevokedKeys = a.verifier.RevokedKeys()
	}
	for e := range a.revoked {
		p.RevokedEpochs = append(p.RevokedEpochs, e)
	}
	a.mu.RUnlock()
	slices.Sort(p.RevokedEpochs)
	inForce := a.modes.Rules()
	if inForce == nil {
		inForce = []gateway.ModeRule{}
	}
	p.ModesInForce = &inForce
	return p
}

// write persists p as the State file; the caller holds a.change. A change
// builds the snapshot it is about to make, writes it, and only then applies
// it in memory, so memory never runs ahead of the file.
func (a *Authority) write(p persisted) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err == nil {
		err = WriteFileAtomic(a.files.State, data, 0o600)
	}
	if err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "persist operator state")
	}
	return nil
}

// WriteFileAtomic replaces path with data so readers see old or new, never
// half, and so the new content survives a crash once it returns: a temporary
// file of this call's own (writers sharing path never write into each
// other's), fsynced, renamed over path, and then the directory fsynced so the
// rename itself is durable: the Linux fsync(2) man page says syncing a file
// does not make its directory entry durable, that needs an fsync of the
// directory too.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = fsync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = renameDurable(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// renameDurable renames from over to (in one directory) and fsyncs the
// directory, so that the rename survives a crash once it returns.
func renameDurable(from, to string) error {
	if err := os.Rename(from, to); err != nil {
		return err
	}
	return syncDir(to)
}

// syncDir fsyncs the directory holding path, so that a rename into it that
// landed survives a crash once it returns.
func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	err = fsync(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// fsync flushes f to stable storage (a variable so a test can watch the order).
var fsync = func(f *os.File) error { return f.Sync() }

// newSeed returns a fresh Ed25519 seed.
func newSeed() ([]byte, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInternal, "generate key")
	}
	return seed, nil
}

// writeSeed persists seed (hex) at path, mode 0600.
func writeSeed(path string, seed []byte) error {
	if err := WriteFileAtomic(path, []byte(hex.EncodeToString(seed)+"\n"), 0o600); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "persist signing key")
	}
	return nil
}

// loadOrCreateSeed reads a hex Ed25519 seed, creating one if absent.
func loadOrCreateSeed(path string) ([]byte, error) {
	seed, err := readSeed(path)
	if errors.Is(err, os.ErrNotExist) {
		if seed, err = newSeed(); err == nil {
			err = writeSeed(path, seed)
		}
	}
	return seed, err
}

// readSeed reads a hex Ed25519 seed (an error wrapping os.ErrNotExist if
// there is none).
func readSeed(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("signing key %s: not a hex Ed25519 seed", path)
	}
	return seed, nil
}
