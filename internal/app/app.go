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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
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
	metrics    *metrics
	auth       *authority.Authority
	// refusedBundle is the last bundle file version refused (logged once).
	refusedBundle uint64
	// remote is the registry in another process (registryURL), nil if none.
	remote *remoteQuerier
	tls    *tls.Config
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
	built := &App{cfg: cfg, log: log, metrics: newMetrics()}
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
	store, err := openFenceStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, store.Close)

	objects, err := openObjectStores(ctx, cfg, log)
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
		Log: log, Alarm: a.metrics}
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
				"loses issued fences, detected as a coordination state loss that pauses grants", "backend", redactURL(cfg.Registry.Backend))
		}
		loss := registry.Config{Memory: fileMemory{path: incarnationPath(cfg.DataDir)}, OnLoss: a.retireEpoch, Log: log}
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
		a.metrics.registry(a.Registry)
	}
	verifier := a.auth.Verifier()
	gcfg := gateway.Config{Verifier: verifier, Store: store, Log: log, Alarm: a.metrics, Policy: a.auth, Modes: a.auth.Modes(), Access: access,
		EffectTimeout: cfg.EffectTimeout}
	if fp := os.Getenv("FENCEGATE_FAILPOINT"); fp != "" {
		// Test-only: crash at the named point of the acceptance point.
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
		if a.remote, err = newRemoteQuerier(cfg.RegistryURL, tok, verifier); err != nil {
			return nil, err
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
	objectResolver := func(target string) gateway.Resolver {
		if _, _, ok := gateway.SplitObjectTarget(target); ok {
			return gateway.ObjectResolver{Stores: objects, EffectTimeout: cfg.EffectTimeout, Grace: cfg.Reconcile.Orphan}
		}
		return nil
	}
	resolvers := httpapi.Resolvers(apis).Or(objectResolver)
	// A replayed segment whose receipt is UNKNOWN is settled (an API call
	// resent under its key) before it is answered.
	gcfg.Resolver = resolvers
	if a.Gateway, err = gateway.New(gcfg); err != nil {
		return nil, err
	}
	a.reconciler = &gateway.Reconciler{
		Store: store, Log: log, Deadline: cfg.Reconcile.Deadline, Orphan: cfg.Reconcile.Orphan,
		Resolver: resolvers, OnOverdue: a.raiseOverdue,
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
	srv := &handlers.Server{
		Gateway: a.Gateway, Stores: objects, Auth: auth,
		AdminAuth: handlers.NewBearerTokens(adminTokens), Admin: a.auth, GatewayAuth: handlers.NewBearerTokens(gatewayTokens),
		Registry: a.Registry, Reconciler: a.reconciler, APIs: apis, MaxBody: cfg.MaxBodyBytes, QuarantinePayload: quarantineBound(cfg.QuarantinePayloadBytes),
		BodyReadTimeout: cfg.HTTP.BodyReadTimeout, MayRead: access.MayRead, Bindings: bindings, SpoolDir: spool, Log: log, Ready: a.ready.Load,
		Refused: a.metrics.Refused, MemoryBody: memoryBound(cfg.HTTP.MemoryBodyBytes), MemoryBodies: cfg.HTTP.MemoryBodiesBytes,
	}
	if a.S3Credentials != nil {
		srv.S3 = s3door.Router(&s3door.Server{Gateway: a.Gateway, Stores: objects, Credentials: a.S3Credentials,
			MayRead: access.MayRead, SpoolDir: spool, MaxBody: cfg.MaxBodyBytes,
			QuarantinePayload: quarantineBound(cfg.QuarantinePayloadBytes), Log: log})
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

// Serve is Run on existing listeners; metrics (nil for none) serves only
// /metrics.
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

// metricsServer serves GET /metrics and nothing else, for operators.
func (a *App) metricsServer() *http.Server {
	prom := promhttp.HandlerFor(a.metrics.reg, promhttp.HandlerOpts{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		prom.ServeHTTP(w, r)
	})
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 16 << 10}
}

// metrics holds the gateway's Prometheus metrics and raises alarms.
type metrics struct {
	reg         *prometheus.Registry
	regressions *prometheus.CounterVec
	shadow      *prometheus.CounterVec
	overdue     prometheus.Gauge
	resends     *prometheus.CounterVec
	breakGlass  *prometheus.CounterVec
	refusals    *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.regressions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_fence_regressions_total",
		Help: "Grants refused with FENCE_REGRESSION: the registry handed out a fence at or below one already seen.",
	}, []string{"resource"})
	m.shadow = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_shadow_verdicts_total",
		Help: "Refusals that shadow mode recorded and forwarded anyway, by code (resources are in the log).",
	}, []string{"code"})
	m.overdue = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_unknown_overdue",
		Help: "UNKNOWN receipts older than the reconcile deadline: they need manual reconciliation (alert on > 0).",
	})
	m.resends = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_upstream_resends_total",
		Help: "Upstream API requests resent under their idempotency key (by the reconciler or a replay), by API and why.",
	}, []string{"api", "reason"})
	m.breakGlass = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_break_glass_total",
		Help: "Uses of break-glass that switched resource-side validation off: at start (--break-glass) or by an operator (admin API).",
	}, []string{"source"})
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_refusals_total",
		Help: "Problem answers (refusals and failures), by code: every one, including those the rate-limited log left out.",
	}, []string{"code"})
	m.reg.MustRegister(m.resends, m.regressions, m.shadow, m.overdue, m.breakGlass, m.refusals, prometheus.NewGoCollector())
	return m
}

// Resend counts one same-key resend of an upstream API request.
func (m *metrics) Resend(api, reason string) { m.resends.WithLabelValues(api, reason).Inc() }

// FenceRegression counts a regression (the gateway core logs it).
func (m *metrics) FenceRegression(resource string, _ uint64, _ error) {
	m.regressions.WithLabelValues(resource).Inc()
}

// ShadowVerdict counts a refusal shadow mode let through.
func (m *metrics) ShadowVerdict(_ string, code fencegate.Code) {
	m.shadow.WithLabelValues(string(code)).Inc()
}

// Refused counts one problem answer (handlers.Server.Refused).
func (m *metrics) Refused(code fencegate.Code) { m.refusals.WithLabelValues(string(code)).Inc() }

// BreakGlass counts a use of break-glass (authority.Alarm).
func (m *metrics) BreakGlass(source string) { m.breakGlass.WithLabelValues(source).Inc() }

var (
	_ gateway.Alarm   = (*metrics)(nil)
	_ authority.Alarm = (*metrics)(nil)
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
