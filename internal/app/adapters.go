package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/s3"
	"github.com/fencegate/fencegate/config"
	fsembedded "github.com/fencegate/fencegate/fencestore/embedded"
	fspostgres "github.com/fencegate/fencegate/fencestore/postgres"
	"github.com/fencegate/fencegate/registry"
	regembedded "github.com/fencegate/fencegate/registry/embedded"
	regetcd "github.com/fencegate/fencegate/registry/etcd"
	regpostgres "github.com/fencegate/fencegate/registry/postgres"
	regredis "github.com/fencegate/fencegate/registry/redis"
)

func openFenceStore(ctx context.Context, cfg config.Config, log *slog.Logger) (fencegate.FenceStore, error) {
	if cfg.FenceStore == "embedded" {
		return fsembedded.Open(filepath.Join(cfg.DataDir, "fencestore.db"))
	}
	return fspostgres.Open(ctx, cfg.FenceStore, fspostgres.WithLogger(log))
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
			su, _ := s3.ParseURL(raw) // validated by config.Validate
			st, err := s3.OpenURL(ctx, name, su)
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
			if !caps.ConditionalMultipart {
				log.Warn("store does not keep If-None-Match / If-Match on CompleteMultipartUpload: objects needing a multipart upload are refused with UNSUPPORTED", "store", name)
			}
			out[name] = st
		}
	}
	return out, errors.Join(errs...)
}

// openRegistry builds the in-process registry over its coordination
// backend; it signs with what auth holds and auth sets floors through it.
func openRegistry(ctx context.Context, cfg config.Config, auth *authority.Authority, access registry.Access, loss registry.Config) (*registry.Registry, func() error, error) {
	rc := cfg.Registry
	backend, err := openLeaseBackend(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("registry backend: %w", err)
	}
	reg, err := registry.New(registry.Config{Backend: backend, Authority: auth, StatusLife: rc.StatusLife, MaxTTL: rc.MaxTTL,
		Access: access, HighWater: loss.HighWater, Memory: loss.Memory, OnLoss: loss.OnLoss, Log: loss.Log, S3: auth.S3(), Handoff: loss.Handoff})
	if err != nil {
		_ = backend.Close()
		return nil, nil, err
	}
	auth.ServeFloors(reg)
	return reg, backend.Close, nil
}

// openLeaseBackend opens the registry's coordination backend as
// config.ParseLeaseBackend read it (Validate has accepted it), with the
// configured lease retention (registry.leaseRetention).
func openLeaseBackend(ctx context.Context, cfg config.Config) (fencegate.LeaseBackend, error) {
	b, err := config.ParseLeaseBackend(cfg.Registry.Backend)
	if err != nil {
		return nil, err
	}
	retention := cfg.Registry.Retention() // every backend forgets on one rule
	switch b.Kind {
	case "embedded":
		return regembedded.Open(filepath.Join(cfg.DataDir, "registry.db"), regembedded.WithRetention(retention))
	case "postgres":
		return regpostgres.Open(ctx, b.DSN, regpostgres.WithRetention(retention))
	case "redis":
		opts := []regredis.Option{regredis.WithRetention(retention)}
		if b.Prefix != "" {
			opts = append(opts, regredis.WithPrefix(b.Prefix))
		}
		if cfg.Registry.AllowVolatileBackend {
			opts = append(opts, regredis.AllowVolatile())
		}
		if b.Replicas > 0 {
			opts = append(opts, regredis.WithReplicas(b.Replicas, b.Wait))
		}
		return regredis.Open(ctx, b.Hosts[0], opts...)
	case "etcd":
		opts := []regetcd.Option{regetcd.WithRetention(retention)}
		if b.Prefix != "" {
			opts = append(opts, regetcd.WithPrefix(b.Prefix))
		}
		return regetcd.Open(ctx, b.Hosts, opts...)
	}
	return nil, fmt.Errorf("unknown registry backend %q", cfg.Registry.Backend)
}

// openAPIs builds the configured third-party APIs from the validated config:
// each has declared a fencing contract or the config was refused.
// Every resend is logged and counted by onResend.
func openAPIs(cfg config.Config, log *slog.Logger, onResend func(api, reason string)) (map[string]*httpapi.API, error) {
	return httpapi.NewAll(cfg.APIConfig(), &http.Client{}, httpapi.WithLogger(log), httpapi.WithResendHook(onResend),
		httpapi.WithEffectTimeout(cfg.EffectTimeout))
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
		pool, err := config.LoadCAPool("tls clientCA", c.ClientCA)
		if err != nil {
			return nil, err
		}
		// Verified when given: workloads present one, operators may use bearer tokens.
		out.ClientCAs, out.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	return out, nil
}
