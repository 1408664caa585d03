package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/registry"
)

// fileMemory is the registry's memory of its backend's incarnation, kept in
// the data directory (registry-incarnation.json), replaced atomically.
type fileMemory struct{ path string }

var _ registry.Memory = fileMemory{}

func (m fileMemory) Load() (fencegate.Incarnation, error) {
	var inc fencegate.Incarnation
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

func (m fileMemory) Save(inc fencegate.Incarnation) error {
	data, _ := json.MarshalIndent(inc, "", "  ")
	return authority.WriteFileAtomic(m.path, data, 0o600)
}

func incarnationPath(dataDir string) string {
	return filepath.Join(dataDir, "registry-incarnation.json")
}

// retireEpoch is the registry's loss hook: it retires the current issuer
// epoch through the operator path, which rotates to a new key first, so
// grants signed before a coordination state loss stop verifying here at once
// and their status proofs everywhere within one proof life.
func (a *App) retireEpoch(ctx context.Context) error {
	if a.auth == nil {
		return fencegate.Errorf(fencegate.CodeInternal, "the operator state is not built yet")
	}
	_, err := a.auth.RetireEpoch(ctx, a.auth.CurrentEpoch())
	return err
}

// registryMetrics exposes the registry's issuing state.
func (m *metrics) registry(reg *registry.Registry) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencegate_registry_grants_paused",
			Help: "1 while the registry refuses grants after a coordination state loss (COORDINATION_STATE_LOST), else 0.",
		}, func() float64 {
			if reg.Issuance().Paused {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fencegate_registry_state_losses_total",
			Help: "Coordination state losses the registry detected (backend emptied, replaced or rolled back).",
		}, func() float64 { return float64(reg.Issuance().Losses) }),
	)
}

// redactURL drops the user information (passwords) of a backend URL for logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	return u.Redacted()
}
