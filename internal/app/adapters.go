package app

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lestrrat-go/jwx/v2/jwa"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/s3"
	"github.com/fencegate/fencegate/config"
	fsembedded "github.com/fencegate/fencegate/fencestore/embedded"
	fspostgres "github.com/fencegate/fencegate/fencestore/postgres"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/registry"
	regembedded "github.com/fencegate/fencegate/registry/embedded"
	regetcd "github.com/fencegate/fencegate/registry/etcd"
	regpostgres "github.com/fencegate/fencegate/registry/postgres"
	regredis "github.com/fencegate/fencegate/registry/redis"
)

func openFenceStore(ctx context.Context, cfg config.Config) (fencegate.FenceStore, error) {
	if cfg.FenceStore == "embedded" {
		return fsembedded.Open(filepath.Join(cfg.DataDir, "fencestore.db"))
	}
	return fspostgres.Open(ctx, cfg.FenceStore)
}

// openObjectStores opens every configured store and admits only those that
// keep the fencing contract: an S3 store that fails the conditional-write
// probe stops the start with a message naming it.
func openObjectStores(ctx context.Context, cfg config.Config, log *slog.Logger) (map[string]fencegate.ObjectStore, error) {
	out := map[string]fencegate.ObjectStore{}
	var errs []error
	for name, raw := range cfg.Stores {
		u, err := url.Parse(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("store %q: %w", name, err))
			continue
		}
		switch u.Scheme {
		case "local":
			dir := strings.TrimPrefix(raw, "local:")
			dir = strings.TrimPrefix(dir, "//")
			if dir == "" {
				dir = filepath.Join(cfg.DataDir, "objects", name)
			}
			st, err := local.New(name, dir)
			if err != nil {
				errs = append(errs, fmt.Errorf("store %q: %w", name, err))
				continue
			}
			out[name] = st
		case "s3":
			st, err := s3.Open(ctx, name, raw)
			if err != nil {
				errs = append(errs, fmt.Errorf("store %q: %w", name, err))
				continue
			}
			caps, err := st.Probe(ctx)
			if err != nil {
				errs = append(errs, fmt.Errorf("store %q refused: %w", name, err))
				continue
			}
			if !caps.ConditionalDelete {
				log.Warn("store ignores If-Match on DELETE: fenced deletes on it are refused with UNSUPPORTED", "store", name)
			}
			out[name] = st
		}
	}
	return out, errors.Join(errs...)
}

// openRegistry builds the in-process registry with its signing key, resuming
// the epoch, key ID, policy generation and revocations an operator set.
func openRegistry(ctx context.Context, cfg config.Config, st persisted, keyPath string, access registry.Access) (*registry.Registry, *proofs.Signer, func() error, error) {
	rc := cfg.Registry
	seed, err := loadOrCreateSeed(keyPath)
	if err != nil {
		return nil, nil, nil, err
	}
	epoch, kid := rc.IssuerEpoch, rc.KeyID
	if kid == "" {
		kid = "registry-1"
	}
	if st.IssuerEpoch > 0 {
		epoch, kid = st.IssuerEpoch, st.KeyID
	}
	signer, err := proofs.NewSigner(ed25519.NewKeyFromSeed(seed), kid, jwa.EdDSA)
	if err != nil {
		return nil, nil, nil, err
	}
	backend, err := openLeaseBackend(ctx, cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("registry backend: %w", err)
	}
	reg, err := registry.New(registry.Config{
		Backend: backend, Signer: signer, IssuerEpoch: epoch,
		PolicyGeneration: max(cfg.PolicyGeneration, st.PolicyGeneration), StatusLife: rc.StatusLife, MaxTTL: rc.MaxTTL,
		Access: access,
	})
	if err == nil {
		err = reg.Restore(registry.AuthorityState{IssuerEpoch: epoch, PolicyGeneration: st.PolicyGeneration,
			RevokedEpochs: slices.DeleteFunc(slices.Clone(st.RevokedEpochs), func(e uint64) bool { return e >= epoch })})
	}
	if err != nil {
		_ = backend.Close()
		return nil, nil, nil, err
	}
	return reg, signer, backend.Close, nil
}

// openLeaseBackend opens the registry's coordination backend: "embedded",
// postgres://..., redis://HOST:PORT[?prefix=P] or etcd://HOST:PORT[,HOST:PORT][?prefix=P].
func openLeaseBackend(ctx context.Context, cfg config.Config) (fencegate.LeaseBackend, error) {
	raw := cfg.Registry.Backend
	if raw == "embedded" {
		return regembedded.Open(filepath.Join(cfg.DataDir, "registry.db"))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		return regpostgres.Open(ctx, raw)
	case "redis":
		var opts []regredis.Option
		if p := u.Query().Get("prefix"); p != "" {
			opts = append(opts, regredis.WithPrefix(p))
		}
		return regredis.Open(ctx, u.Host, opts...)
	case "etcd":
		var opts []regetcd.Option
		if p := u.Query().Get("prefix"); p != "" {
			opts = append(opts, regetcd.WithPrefix(p))
		}
		return regetcd.Open(ctx, strings.Split(u.Host, ","), opts...)
	}
	return nil, fmt.Errorf("unknown registry backend %q", raw)
}

// buildVerifier trusts the bundle file (the configured one, else the one in
// the data directory). With an in-process registry and no file yet, it writes
// one holding the registry's key; the registry's key must be in the bundle.
func buildVerifier(bundlePath string, signer *proofs.Signer, epoch uint64) (*proofs.Verifier, error) {
	b, err := proofs.LoadBundle(bundlePath)
	if errors.Is(err, os.ErrNotExist) && signer != nil {
		b, err = proofs.NewBundle(1, signer.BundleKey(epoch))
		if err == nil {
			var data []byte
			if data, err = b.Marshal(); err == nil {
				err = writeFileAtomic(bundlePath, data, 0o644)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("trust bundle %s: %w", bundlePath, err)
	}
	if signer != nil {
		k, ok := b.Key(signer.KeyID())
		if !ok {
			return nil, fmt.Errorf("trust bundle %s lacks the registry's signing key %q", bundlePath, signer.KeyID())
		}
		want, err1 := signer.PublicKey().Thumbprint(crypto.SHA256)
		got, err2 := k.Key.Thumbprint(crypto.SHA256)
		if err1 != nil || err2 != nil || !bytes.Equal(want, got) {
			return nil, fmt.Errorf("trust bundle %s holds another key under the registry's key ID %q", bundlePath, signer.KeyID())
		}
	}
	return proofs.NewVerifier(b)
}

// loadOrCreateSeed reads a hex Ed25519 seed, creating one (mode 0600) if absent.
func loadOrCreateSeed(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		seed := make([]byte, ed25519.SeedSize)
		if _, err := rand.Read(seed); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(hex.EncodeToString(seed)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("signing key: %w", err)
		}
		return seed, nil
	}
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	seed, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("signing key %s: not a hex Ed25519 seed", path)
	}
	return seed, nil
}

// openAPIs builds the configured third-party APIs from the validated config:
// each has declared a fencing contract or the config was refused.
// Every resend is logged and counted by onResend.
func openAPIs(cfg config.Config, log *slog.Logger, onResend func(api, reason string)) (map[string]*httpapi.API, error) {
	return httpapi.NewAll(cfg.APIConfig(), &http.Client{}, httpapi.WithLogger(log), httpapi.WithResendHook(onResend))
}

// serverTLS loads the server certificate and, when given, the client CA that
// mTLS identities must chain to; nil config serves plain HTTP.
func serverTLS(c *config.TLS) (*tls.Config, error) {
	if c == nil {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	out := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.ClientCA != "" {
		pem, err := os.ReadFile(c.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("tls clientCA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls clientCA %s holds no PEM certificate", c.ClientCA)
		}
		// Verified when given: workloads present one, operators may use bearer tokens.
		out.ClientCAs, out.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return out, nil
}
