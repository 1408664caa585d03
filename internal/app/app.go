// Package app assembles a running gateway from a validated config: it builds
// every adapter, wires the acceptance point, the registry, the reconciler and
// the HTTP surface, serves, and shuts down gracefully. It is the only package
// besides the adapters that knows which adapters exist.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
	"github.com/fencegate/fencegate/internal/metrics"
	spoolpkg "github.com/fencegate/fencegate/internal/spool"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/s3cred"
	"github.com/fencegate/fencegate/s3door"
)

// App is a built gateway, ready to serve.
type App struct {
	cfg        config.Config
	log        *slog.Logger
	handler    http.Handler
	reconciler *gateway.Reconciler
	closers    []func() error
	ready      atomic.Bool
	// failing is the fence store when it can fail for good (the embedded
	// store after a failed commit), nil otherwise: /healthz reports it.
	failing failing
	metrics *metrics.Metrics
	auth    *authority.Authority
	// refusedBundle is the last refusal of the bundle file (its version and
	// why), logged once; "" once a reload refuses nothing.
	refusedBundle string
	// remote is the registry in another process (registryURL), nil if none.
	remote *remoteQuerier
	// pullMu serialises bundle pulls (pull); pulledAt is when the last one
	// ended, pullErr its failure as logged (once until the next success).
	pullMu   sync.Mutex
	pulledAt time.Time
	pullErr  string
	// refused is the last fetched bundle the authority refused (or whose
	// chain could not be fetched), offered again only once its wait has
	// passed (pull's backoff).
	refused refusedFetch
	// pullClock is pull's time (nil: time.Now); tests set it.
	pullClock func() time.Time
	tls       *tls.Config
	// Registry is the in-process registry, nil if none.
	Registry *registry.Registry
	// Gateway is the acceptance point.
	Gateway *gateway.Gateway
	// S3Credentials resolves leases' S3 credentials for the S3 front door
	// (package s3cred), asking the in-process registry or, for a replica,
	// the registry at registryURL; nil when there is neither.
	S3Credentials fencegate.S3Credentials
}

// Build validates cfg and builds every part. On error nothing is left open.
func Build(ctx context.Context, cfg config.Config, log *slog.Logger) (a *App, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	built := &App{cfg: cfg, log: log, metrics: metrics.New()}
	a = built
	defer func() {
		if err != nil { // a is already nil here: every error return is `return nil, err`
			built.Close()
			a = nil
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	// Bodies spooled before a crash are never needed again.
	spool := filepath.Join(cfg.DataDir, "spool")
	if err := os.RemoveAll(spool); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(spool, 0o700); err != nil {
		return nil, err
	}
	tracer, closeTracing, err := openTracing(cfg.Tracing)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	a.closers = append(a.closers, closeTracing)
	store, err := openFenceStore(ctx, cfg, a.log)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, store.Close)
	a.failing, _ = store.(failing)

	objects, err := openObjectStores(ctx, cfg, log)
	for _, st := range objects {
		if c, ok := st.(interface{ Close() error }); ok { // a local store's directory lock
			a.closers = append(a.closers, c.Close)
		}
	}
	if err != nil {
		return nil, err
	}

	files := authority.Files{State: filepath.Join(cfg.DataDir, "authority.json"),
		Bundle: filepath.Join(cfg.DataDir, "trust-bundle.json"), Key: filepath.Join(cfg.DataDir, "registry-signing-key"),
		S3Key: filepath.Join(cfg.DataDir, "s3-credential-key")}
	if cfg.TrustBundle != "" {
		files.Bundle = cfg.TrustBundle
	}
	acfg := authority.Config{Files: files, Signing: cfg.Registry != nil, PolicyGeneration: cfg.PolicyGeneration,
		RevokedEpochs: cfg.RevokedEpochs, Modes: cfg.Modes, BreakGlass: cfg.BreakGlass, Overlap: cfg.KeyOverlap,
		AcceptUnsignedBundles: cfg.AcceptsUnsignedBundles(), Log: log, Alarm: a.metrics}
	if rc := cfg.Registry; rc != nil {
		acfg.KeyID, acfg.IssuerEpoch = rc.KeyID, rc.IssuerEpoch
		if rc.SigningKey != "" {
			acfg.Files.Key = rc.SigningKey
		}
		if rc.S3CredentialKey != "" {
			acfg.Files.S3Key = rc.S3CredentialKey
		}
	}
	if a.auth, err = authority.Open(acfg); err != nil {
		return nil, err
	}
	access, err := cfg.Access.Policy()
	if err != nil {
		return nil, err
	}
	switch {
	case access.IsOpen():
		log.Warn("access policy: none configured, every workload may lease and read every resource (gateway dev)")
	case len(cfg.Access.Rules) == 0:
		log.Warn("access policy: no rules, every workload's lease, write and read is refused (FORBIDDEN)")
	}
	if cfg.Registry != nil {
		if cfg.Registry.AllowVolatileBackend {
			log.Warn("registry backend accepted without durable writes (--allow-volatile-backend): a crash or restart of it "+
				"loses issued fences, detected as a coordination state loss that pauses grants; keys it evicts (a maxmemory-policy "+
				"other than noeviction) are not detected, and gateways then refuse the fences issued again (FENCE_REGRESSION)",
				"backend", config.Redacted(cfg.Registry.Backend))
		}
		loss := registry.Config{Memory: fileMemory{path: incarnationPath(cfg.DataDir)}, OnLoss: a.retireEpoch, Log: log, Handoff: a.metrics}
		if hw, ok := store.(fencegate.HighWater); ok && cfg.HighWaterSource() == "fencestore" {
			loss.HighWater = hw
		}
		var closeReg func() error
		if a.Registry, closeReg, err = openRegistry(ctx, cfg, a.auth, access, loss); err != nil {
			return nil, err
		}
		a.closers = append(a.closers, closeReg)
		// Before any grant: compare the backend with what was seen and accepted.
		if err := a.Registry.Check(ctx); err != nil && fencegate.ErrorCode(err) != fencegate.CodeStateLost {
			return nil, fmt.Errorf("registry backend: %w", err)
		}
		a.closers = append(a.closers, a.Registry.Remember)
		reg := a.Registry
		a.metrics.RegistryIssuance(func() (bool, uint64) { is := reg.Issuance(); return is.AfterLoss(), is.Losses })
	}
	if gc, ok := store.(fencegate.GroupCommitter); ok {
		a.metrics.FenceStoreBatches(gc.GroupCommits)
	}
	verifier := a.auth.Verifier()
	a.metrics.ProofCache(func() (uint64, uint64, uint64, uint64) {
		c := verifier.CacheStats()
		return c.GrantHits.Load(), c.GrantMisses.Load(), c.StatusHits.Load(), c.StatusMisses.Load()
	})
	gcfg := gateway.Config{Verifier: verifier, Store: store, Log: log, Alarm: a.metrics, Observe: a.metrics, Tracer: tracer, Policy: a.auth, Modes: a.auth.Modes(), Access: access,
		EffectTimeout: cfg.EffectTimeout, DeferSettle: cfg.DeferSettle}
	if fp := cfg.Failpoint; fp != "" {
		// Test-only (gateway dev): crash at the named point of the acceptance point.
		log.Warn("failpoint armed: the process exits at it", "failpoint", fp)
		gcfg.Failpoint = func(name string) {
			if name == fp {
				log.Error("failpoint reached: exiting", "failpoint", name)
				os.Exit(3)
			}
		}
	}
	if cfg.RegistryURL != "" {
		tok, err := cfg.RegistryCredential.Secret()
		if err != nil {
			return nil, err
		}
		roots, err := cfg.RegistryRootCAs()
		if err != nil {
			return nil, err
		}
		if a.remote, err = newRemoteQuerier(cfg.RegistryURL, tok, verifier, roots); err != nil {
			return nil, err
		}
		a.remote.refresh = func(ctx context.Context) { a.pull(ctx, time.Second) }
		if cfg.AcceptsUnsignedBundles() {
			log.Warn("registryBundleUnsigned: accept: a trust bundle from registryURL without a signature is installed, so whoever can answer or strip it names the keys this replica trusts; only while the registry is upgraded to one that signs, then remove the setting",
				"registryURL", config.Redacted(cfg.RegistryURL))
		}
		if cfg.InsecureRegistryHTTP() {
			log.Warn("registryURL is plain http (registryInsecureHTTP): whoever can answer it reads the gateway credential (and, with registryBundleUnsigned: accept, names the keys this replica trusts); only for a private network you trust",
				"registryURL", config.Redacted(cfg.RegistryURL))
		}
	}
	switch {
	case a.Registry != nil:
		a.S3Credentials = &s3cred.Resolver{Verifier: verifier, Source: a.Registry}
	case a.remote != nil:
		a.S3Credentials = &s3cred.Resolver{Verifier: verifier, Source: a.remote}
	}
	switch {
	case cfg.StatusMode == "query" && a.Registry != nil:
		gcfg.Querier = a.Registry
	case a.Registry != nil:
		gcfg.Confirm = a.Registry // a new fence's first write is checked against the backend too
	case cfg.StatusMode == "query":
		gcfg.Querier = a.remote
	case a.remote != nil:
		gcfg.Confirm = a.remote // proof mode with a registry to ask: a grant's first write is confirmed there
	}
	apis, err := openAPIs(cfg, log, a.metrics.Resend)
	if err != nil {
		return nil, err
	}
	// Every backend's fault series starts at 0 (FencegateBackendUnavailable).
	for name := range objects {
		a.metrics.Backends(gateway.BackendOf(fencegate.ObjectTarget(name, "k")))
	}
	for name := range apis {
		a.metrics.Backends(gateway.BackendOf(fencegate.APITarget(name, "k")))
	}
	objectResolver := func(target string) gateway.Resolver {
		if _, _, ok := fencegate.SplitObjectTarget(target); ok {
			return gateway.ObjectResolver{Stores: objects, EffectTimeout: cfg.EffectTimeout, Grace: cfg.Reconcile.Orphan}
		}
		return nil
	}
	resolvers := httpapi.Resolvers(apis).Or(objectResolver)
	// A replayed segment whose receipt is UNKNOWN is settled (an API call
	// resent under its key) before it is answered.
	gcfg.Resolver = resolvers
	background, stopBackground := context.WithCancel(context.Background())
	gcfg.Background = background
	if a.Gateway, err = gateway.New(gcfg); err != nil {
		stopBackground()
		return nil, err
	}
	// Closed before the store (closers run in reverse): every deferred
	// settle is made durable first, also when Serve was not used, and then
	// the gateway's background flushes and retries stop, so none outlives
	// the store.
	gw := a.Gateway
	a.closers = append(a.closers, func() error {
		defer stopBackground()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return gw.Drain(ctx)
	})
	a.reconciler = &gateway.Reconciler{
		Store: store, Log: log, Deadline: cfg.Reconcile.Deadline, Orphan: cfg.Reconcile.Orphan,
		Resolver: resolvers, OnOverdue: a.raiseOverdue, Observe: a.metrics,
	}
	tokens, err := cfg.Tokens()
	if err != nil {
		return nil, err
	}
	adminTokens, err := config.TokensOf(cfg.Admins)
	if err != nil {
		return nil, err
	}
	gatewayTokens, err := config.TokensOf(cfg.Gateways)
	if err != nil {
		return nil, err
	}
	var auth handlers.Authenticator = handlers.NewBearerTokens(tokens)
	if cfg.Auth == "mtls" {
		auth = handlers.ClientCerts{}
	}
	if a.tls, err = serverTLS(cfg.TLS); err != nil {
		return nil, err
	}
	bindings := &gateway.Bindings{Store: store, Log: log}
	if a.Registry != nil {
		bindings.Leases = a.Registry
	}
	// One body pool (one memory budget) for both HTTP surfaces.
	bodies := spoolpkg.NewPool(memoryBound(cfg.HTTP.MemoryBodyBytes), cfg.HTTP.MemoryBodiesBytes)
	srv := &handlers.Server{
		Gateway: a.Gateway, Stores: objects, Auth: auth,
		AdminAuth: handlers.NewBearerTokens(adminTokens), Admin: a.auth, GatewayAuth: handlers.NewBearerTokens(gatewayTokens),
		Registry: a.Registry, Reconciler: a.reconciler, APIs: apis, MaxBody: cfg.MaxBodyBytes, QuarantinePayload: quarantineBound(cfg.QuarantinePayloadBytes),
		BodyReadTimeout: cfg.HTTP.BodyReadTimeout, AnswerWriteTimeout: cfg.HTTP.WriteTimeout, MayRead: access.MayRead, Bindings: bindings, SpoolDir: spool, Log: log, Ready: a.healthy,
		Refused: a.metrics.Refused, Observe: a.metrics, Tracer: tracer, MemoryBody: memoryBound(cfg.HTTP.MemoryBodyBytes), MemoryBodies: cfg.HTTP.MemoryBodiesBytes, Bodies: bodies,
	}
	if a.S3Credentials != nil {
		srv.S3 = s3door.Router(&s3door.Server{Gateway: a.Gateway, Stores: objects, Credentials: a.S3Credentials,
			MayRead: access.MayRead, SpoolDir: spool, Bodies: bodies, MaxBody: cfg.MaxBodyBytes, StagingBytes: cfg.StagingBytes(),
			StagingBytesPerIdentity: cfg.StagingBytesPerIdentity(), QuarantinePayload: quarantineBound(cfg.QuarantinePayloadBytes), Log: log,
			Refused: srv.Refusal}) // counted and logged where the REST API's answers are
	}
	// The router is served as it is: no http.ServeMux in front, which would
	// answer ".", ".." and "//" paths with a redirect to a cleaned path.
	a.handler = handlers.Router(srv)
	return a, nil
}

// Run listens on the configured addresses (the API, and the operator's
// metrics listener if configured) and serves until ctx ends, then drains
// in-flight requests (up to 30 s) and stops the reconciler.
func (a *App) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.Addr)
	if err != nil {
		return err
	}
	var mln net.Listener
	if a.cfg.MetricsAddr != "" {
		if mln, err = net.Listen("tcp", a.cfg.MetricsAddr); err != nil {
			ln.Close()
			return fmt.Errorf("metrics listener: %w", err)
		}
	}
	return a.Serve(ctx, ln, mln)
}

// Serve is Run on existing listeners; metrics (nil for none) is the
// operator listener (see operatorHandler).
func (a *App) Serve(ctx context.Context, ln, metrics net.Listener) error {
	lim := a.cfg.HTTP
	hs := &http.Server{Handler: a.handler, ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout: lim.IdleTimeout, MaxHeaderBytes: lim.MaxHeaderBytes}
	ln = netutil.LimitListener(ln, lim.MaxConns)
	if a.tls != nil {
		ln = tls.NewListener(ln, a.tls)
	}
	rctx, stopReconciler := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); a.background(rctx) }()
	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(ln) }()
	if metrics != nil {
		ms := a.metricsServer()
		go func() { errc <- ms.Serve(metrics) }()
		defer ms.Close()
		a.log.Info("metrics listening", "addr", metrics.Addr().String())
	}
	a.ready.Store(true)
	a.log.Info("gateway listening", "addr", ln.Addr().String())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	a.ready.Store(false)
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		a.log.Warn("shutdown", "err", err)
	}
	// Every answered settle still deferred is made durable before the
	// process goes on to close the store (after a crash the objects prove
	// them instead).
	if err := a.Gateway.Drain(sctx); err != nil {
		a.log.Warn("deferred settles left to the reconciler", "left", a.Gateway.DeferredSettles(), "err", err)
	}
	stopReconciler()
	<-done
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// Close releases every adapter, in reverse order of opening.
func (a *App) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i](); err != nil {
			a.log.Warn("close", "err", err)
		}
	}
	a.closers = nil
}

var (
	_ gateway.Alarm            = (*metrics.Metrics)(nil)
	_ gateway.Observer         = (*metrics.Metrics)(nil)
	_ handlers.Observer        = (*metrics.Metrics)(nil)
	_ authority.Alarm          = (*metrics.Metrics)(nil)
	_ registry.HandoffObserver = (*metrics.Metrics)(nil)
)

// memoryBound is the handlers' in-memory body bound for the configured one:
// 0 (spool every body) is negative there, where 0 is the default.
func memoryBound(configured int64) int64 {
	if configured == 0 {
		return -1
	}
	return configured
}

// quarantineBound is the handlers' quarantine payload bound for the
// configured one: 0 (keep none) is negative there, where 0 is the default.
func quarantineBound(configured int64) int64 {
	if configured == 0 {
		return -1
	}
	return configured
}

// failing is a fence store that can fail for good (the embedded store after
// a failed commit: only a restart reopens it).
type failing interface{ Failure() error }

// healthy is what /healthz answers: the gateway has started and not begun
// to stop, and its fence store has not failed for good (once it has,
// /healthz tells an orchestrator to restart the gateway).
func (a *App) healthy() bool {
	return a.ready.Load() && (a.failing == nil || a.failing.Failure() == nil)
}
