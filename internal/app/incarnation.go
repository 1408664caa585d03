package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/registry"
)

// fileMemory is the registry's memory of its backend's incarnation, kept in
// the data directory (registry-incarnation.json), replaced atomically.
type fileMemory struct{ path string }

var _ registry.Memory = fileMemory{}

func (m fileMemory) Load() (registry.Remembered, error) {
	var inc registry.Remembered
	b, err := os.ReadFile(m.path)
	if errors.Is(err, os.ErrNotExist) {
		return inc, nil
	}
	if err != nil {
		return inc, err
	}
	if err := json.Unmarshal(b, &inc); err != nil {
		return inc, fmt.Errorf("%s: %w", m.path, err)
	}
	return inc, nil
}

func (m fileMemory) Save(inc registry.Remembered) error {
	data, _ := json.MarshalIndent(inc, "", "  ")
	return authority.WriteFileAtomic(m.path, data, 0o600)
}

func incarnationPath(dataDir string) string {
	return filepath.Join(dataDir, "registry-incarnation.json")
}

// retireEpoch is the registry's loss hook: it retires epoch (the one signing
// when the loss was found) through the operator path, which rotates to a new
// key in the same bundle version if it still signs, so grants signed before
// a coordination state loss stop verifying here at once and their status
// proofs everywhere within one proof life.
func (a *App) retireEpoch(ctx context.Context, epoch uint64) error {
	if a.auth == nil {
		return fencegate.Errorf(fencegate.CodeInternal, "the operator state is not built yet")
	}
	_, err := a.auth.RetireEpoch(ctx, epoch)
	return err
}
