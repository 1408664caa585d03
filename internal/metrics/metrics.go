// Package metrics is the one Prometheus adapter of the gateway and the
// registry: it implements the small observer interfaces the domain packages
// declare (gateway.Observer and gateway.Alarm, handlers.Observer,
// authority.Alarm) on prometheus/client_golang, so that no domain package
// imports Prometheus.
//
// Guarantees: every label is bounded — a route pattern, a method from a fixed
// list, an error code, a receipt state, a backend or API name and a mode
// pattern from the configuration, a store operation; never a resource, key,
// caller, lease or token (those are in the logs). Names and units follow the
// Prometheus conventions (seconds, _total for counters). The registry holds
// the Go and process collectors and fencegate_build_info.
package metrics

import (
	"net/http"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencegate/fencegate"
)

// latencyBuckets spans 0.5 ms to 30 s: verified-and-cached writes take
// microseconds to a few milliseconds, S3 writes tens of milliseconds.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Metrics holds the registry and every series; its methods are safe for
// concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	requests      *prometheus.HistogramVec
	admissions    *prometheus.HistogramVec
	refusals      *prometheus.CounterVec
	effects       *prometheus.HistogramVec
	settles       *prometheus.HistogramVec
	backendErrors *prometheus.CounterVec
	receipts      *prometheus.CounterVec
	storeErrors   *prometheus.CounterVec
	unknown       prometheus.Gauge
	unknownOldest prometheus.Gauge
	overdue       prometheus.Gauge
	deferred      prometheus.Gauge
	staged        *prometheus.CounterVec
	regressions   prometheus.Counter
	regressionAt  prometheus.Gauge
	regressionFen prometheus.Gauge
	shadow        *prometheus.CounterVec
	resends       *prometheus.CounterVec
	breakGlass    *prometheus.CounterVec
	bundleRefused *prometheus.CounterVec
	handoff       *prometheus.HistogramVec

	handoffs *handoffs

	// The per-write series, bound once per label set (children.go).
	requestObs   *children[[3]string, prometheus.Observer]
	admissionObs *children[string, prometheus.Observer]
	effectObs    *children[[2]string, prometheus.Observer]
	settleObs    *children[string, prometheus.Observer]
	receiptCount *children[string, prometheus.Counter]
	refusalCount *children[string, prometheus.Counter]
	stagedCount  *children[string, prometheus.Counter]
}

// New returns the metrics on a registry of their own.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), handoffs: newHandoffs()}
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fencegate_http_request_duration_seconds", Buckets: latencyBuckets,
		Help: "Answered HTTP requests by route pattern, method and outcome (ok: 1xx-3xx, refused: 4xx, failed: 5xx).",
	}, []string{"route", "method", "outcome"})
	m.admissions = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fencegate_admission_duration_seconds", Buckets: latencyBuckets,
		Help: "Fence store admissions (the one transaction that moves fence, segment and receipt), waiting included, by outcome: admitted, replay or the refusal's code.",
	}, []string{"outcome"})
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_refusals_total",
		Help: "Problem answers (refusals and failures, application/problem+json), by code: every one, including those the rate-limited log left out.",
	}, []string{"code"})
	m.effects = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fencegate_effect_duration_seconds", Buckets: latencyBuckets,
		Help: "Forwarded effects by backend (objects/STORE or apis/API) and the receipt state they left (outcome).",
	}, []string{"backend", "outcome"})
	m.settles = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fencegate_settle_duration_seconds", Buckets: latencyBuckets,
		Help: "Settles a request waited for before its answer (recording the effect's outcome in the fence store), by the state recorded (outcome); a deferred settle (deferSettle) is not on the request's path and not counted.",
	}, []string{"outcome"})
	m.backendErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_backend_errors_total",
		Help: "Forwarded effects that returned an error, by backend and code (BACKEND_UNAVAILABLE and MUTATION_UNKNOWN: the backend could not be reached or did not answer).",
	}, []string{"backend", "code"})
	m.receipts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_receipts_total",
		Help: "Receipts recorded in a state (COMMITTED, FAILED, UNKNOWN, NOT_APPLIED) by an effect's settle or the reconciler.",
	}, []string{"state"})
	m.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_store_errors_total",
		Help: "Fence store faults (no verdict: unreachable, timed out, failed) by operation: admit, settle, list.",
	}, []string{"op"})
	m.unknown = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_unknown_receipts",
		Help: "UNKNOWN receipts waiting for the reconciler or a person, as of the last reconcile pass.",
	})
	m.unknownOldest = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_unknown_oldest_age_seconds",
		Help: "Age of the oldest UNKNOWN receipt at the last reconcile pass (0 when none): every UNKNOWN must settle within 15 minutes.",
	})
	m.overdue = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_unknown_overdue",
		Help: "UNKNOWN receipts older than the reconcile deadline: they need manual reconciliation (alert on > 0).",
	})
	m.deferred = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_deferred_settles",
		Help: "Answered COMMITTED object writes whose settle is not yet durable in the fence store (deferSettle): lost to a crash they are proven from their objects; a value that keeps growing means the store is not taking settles.",
	})
	m.staged = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_staged_writes_total",
		Help: "Small local-store writes whose bytes were synced beside their admission, by how the staging ended (outcome: used, discarded, failed); staged only while no other write of the process is in flight.",
	}, []string{"outcome"})
	m.regressions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "fencegate_fence_regressions_total",
		Help: "Grants refused with FENCE_REGRESSION: the registry handed out a fence at or below one already seen (the resource is in the log).",
	})
	m.regressionAt = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_fence_regression_last_timestamp_seconds",
		Help: "Unix time of the last FENCE_REGRESSION (0: none since start).",
	})
	m.regressionFen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fencegate_fence_regression_last_fence",
		Help: "The fence of the last grant refused with FENCE_REGRESSION (raise the registry's floor above the resource's highest fence).",
	})
	m.shadow = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_shadow_verdicts_total",
		Help: "Refusals that shadow mode recorded and forwarded anyway (would-reject), by code and the mode pattern that shadowed the resource.",
	}, []string{"code", "pattern"})
	m.resends = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_upstream_resends_total",
		Help: "Upstream API requests resent under their idempotency key (by the reconciler or a replay), by API and why.",
	}, []string{"api", "reason"})
	m.breakGlass = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_break_glass_total",
		Help: "Uses of break-glass that switched resource-side validation off: at start (--break-glass) or by an operator (admin API).",
	}, []string{"source"})
	m.bundleRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fencegate_trust_bundle_refusals_total",
		Help: "Trust bundles a replica refused, by source: registry (a fetched bundle that does not parse, or is newer than the one in force and refused: not admitted, not signed by a key in force nor reached along the registry's chain, or refused at install; once per offer, an unchanged one offered again after a backoff of 1 s doubling to a minute; a chain that could not be fetched, the registry unreachable, is not counted) or file (the bundle file that does not load or is refused, once per reload).",
	}, []string{"source"})
	m.handoff = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fencegate_lock_handoff_seconds", Buckets: latencyBuckets,
		Help: "Lock handoff by stage: grant (old lease ended -> new grant, seen by the registry), write (new grant -> first accepted write, seen by the gateway), total (old lease ended -> first accepted write, seen where registry and gateway share a process).",
	}, []string{"stage"})
	m.requestObs, m.admissionObs, m.effectObs = by3(m.requests.WithLabelValues), by1(m.admissions.WithLabelValues), by2(m.effects.WithLabelValues)
	m.settleObs, m.receiptCount, m.refusalCount = by1(m.settles.WithLabelValues), by1(m.receipts.WithLabelValues), by1(m.refusals.WithLabelValues)
	m.stagedCount = by1(m.staged.WithLabelValues)
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fencegate_build_info",
		Help: "Always 1; the labels name the running build (module version, VCS revision, Go version).",
	}, []string{"version", "revision", "goversion"})
	build.WithLabelValues(BuildInfo()).Set(1)
	m.reg.MustRegister(m.requests, m.admissions, m.refusals, m.effects, m.settles, m.backendErrors, m.receipts, m.storeErrors,
		m.unknown, m.unknownOldest, m.overdue, m.deferred, m.staged, m.regressions, m.regressionAt, m.regressionFen, m.shadow, m.resends,
		m.breakGlass, m.bundleRefused, m.handoff, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Series whose labels are known up front start at 0, so that rate() and
	// absent() work from the first scrape.
	m.regressions.Add(0)
	for _, s := range []fencegate.ReceiptState{fencegate.ReceiptCommitted, fencegate.ReceiptFailed, fencegate.ReceiptUnknown, fencegate.ReceiptNotApplied} {
		m.receipts.WithLabelValues(string(s))
	}
	for _, op := range []string{"admit", "settle", "list"} {
		m.storeErrors.WithLabelValues(op)
	}
	for _, source := range []string{"start", "admin"} {
		m.breakGlass.WithLabelValues(source)
	}
	for _, source := range []string{"registry", "file"} {
		m.bundleRefused.WithLabelValues(source)
	}
	for _, outcome := range []string{"used", "discarded", "failed"} {
		m.staged.WithLabelValues(outcome)
	}
	return m
}

// Version is the release version stamped at link time
// (-ldflags "-X github.com/fencegate/fencegate/internal/metrics.Version=v1.2.3",
// as deploy/Dockerfile does); empty means the module version from the build record.
var Version string

// BuildInfo is the version, VCS revision and Go version of this binary, each
// "unknown" when the build record lacks it; fencegate_build_info and
// `gateway version` both report it.
func BuildInfo() (version, revision, goversion string) {
	version, revision, goversion = "unknown", "unknown", "unknown"
	if Version != "" {
		version = Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	goversion = bi.GoVersion
	if bi.Main.Version != "" && Version == "" {
		version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			revision = s.Value
		}
	}
	return
}

// Registry is the Prometheus registry holding every series.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// knownMethods bounds the method label: anything else is "other".
var knownMethods = map[string]bool{"GET": true, "HEAD": true, "PUT": true, "POST": true, "DELETE": true, "PATCH": true, "OPTIONS": true}

// Request observes one answered request (handlers.Observer).
func (m *Metrics) Request(route, method string, status int, d time.Duration) {
	if !knownMethods[method] {
		method = "other"
	}
	if route == "" {
		route = "unmatched"
	}
	outcome := "ok"
	switch {
	case status >= 500:
		outcome = "failed"
	case status >= 400:
		outcome = "refused"
	}
	m.requestObs.get([3]string{route, method, outcome}).Observe(d.Seconds())
}

// Refused counts one problem answer by code (handlers.Server.Refused), every
// one, including those the rate-limited refusal log leaves out.
func (m *Metrics) Refused(code fencegate.Code) { m.refusalCount.get(string(code)).Inc() }

// Admission observes one admission (gateway.Observer).
func (m *Metrics) Admission(outcome string, d time.Duration) {
	m.admissionObs.get(outcome).Observe(d.Seconds())
}

// Effect observes one forwarded effect (gateway.Observer).
func (m *Metrics) Effect(backend string, state fencegate.ReceiptState, code fencegate.Code, d time.Duration) {
	m.effectObs.get([2]string{backend, string(state)}).Observe(d.Seconds())
	if code != "" {
		m.backendErrors.WithLabelValues(backend, string(code)).Inc()
	}
}

// backendFaults are the error codes of an effect that mean its backend could
// not be reached or did not answer: FencegateBackendUnavailable alerts on
// them, so Backends starts them at 0.
var backendFaults = []fencegate.Code{fencegate.CodeBackendUnavailable, fencegate.CodeMutationUnknown}

// Backends starts fencegate_backend_errors_total at 0 for each configured
// backend ("objects/NAME", "apis/NAME") and each code of backendFaults, so
// that a backend's first fault is an increase Prometheus sees (a series born
// at 1 has no earlier sample to rise from).
func (m *Metrics) Backends(backends ...string) {
	for _, b := range backends {
		for _, code := range backendFaults {
			m.backendErrors.WithLabelValues(b, string(code))
		}
	}
}

// Settle observes how long a request waited for its settle (gateway.Observer).
func (m *Metrics) Settle(state fencegate.ReceiptState, d time.Duration) {
	m.settleObs.get(string(state)).Observe(d.Seconds())
}

// Settled counts a receipt recorded in state (gateway.Observer).
func (m *Metrics) Settled(state fencegate.ReceiptState) {
	m.receiptCount.get(string(state)).Inc()
}

// StoreError counts a fence store fault (gateway.Observer).
func (m *Metrics) StoreError(op string) { m.storeErrors.WithLabelValues(op).Inc() }

// Backlog sets the UNKNOWN gauges from a reconcile pass (gateway.Observer).
func (m *Metrics) Backlog(unknown int, oldest time.Duration, overdue int) {
	m.unknown.Set(float64(unknown))
	m.unknownOldest.Set(oldest.Seconds())
	m.overdue.Set(float64(overdue))
}

// Deferred sets the gauge of settles not yet durable (gateway.Observer).
func (m *Metrics) Deferred(n int) { m.deferred.Set(float64(n)) }

// Staged counts a staging by how it ended (gateway.Observer).
func (m *Metrics) Staged(outcome string) { m.stagedCount.get(outcome).Inc() }

// FenceRegression counts a regression and records when and at which fence
// (gateway.Alarm); the resource is in the gateway's log line.
func (m *Metrics) FenceRegression(_ string, fence uint64, _ error) {
	m.regressions.Inc()
	m.regressionAt.SetToCurrentTime()
	m.regressionFen.Set(float64(fence))
}

// ShadowVerdict counts a refusal shadow mode let through (gateway.Alarm).
func (m *Metrics) ShadowVerdict(_, pattern string, code fencegate.Code) {
	m.shadow.WithLabelValues(string(code), pattern).Inc()
}

// BreakGlass counts a use of break-glass (authority.Alarm).
func (m *Metrics) BreakGlass(source string) { m.breakGlass.WithLabelValues(source).Inc() }

// BundleRefused counts a trust bundle refused, by source "registry" or
// "file" (authority.Alarm).
func (m *Metrics) BundleRefused(source string) { m.bundleRefused.WithLabelValues(source).Inc() }

// Resend counts one same-key resend of an upstream API request.
func (m *Metrics) Resend(api, reason string) { m.resends.WithLabelValues(api, reason).Inc() }

// Issuance is what the registry tells about its issuing state.
type Issuance func() (paused bool, losses uint64)

// Registry exposes the in-process registry's issuing state.
func (m *Metrics) RegistryIssuance(issuance Issuance) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fencegate_registry_grants_paused",
			Help: "1 while the registry refuses grants after a coordination state loss (COORDINATION_STATE_LOST), else 0.",
		}, func() float64 {
			if p, _ := issuance(); p {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fencegate_registry_state_losses_total",
			Help: "Coordination state losses the registry detected (backend emptied, replaced or rolled back).",
		}, func() float64 { _, l := issuance(); return float64(l) }),
	)
}

// GroupCommits reads a fence store's group-commit counters: the write
// transactions (batches) it ran and the writes they carried
// (fencegate.GroupCommitter).
type GroupCommits func() (batches, writes uint64)

// FenceStoreBatches exposes the fence store's group commit: writes per batch
// is fencegate_store_batched_writes_total / fencegate_store_batches_total
// (README, Throughput, Tuning).
func (m *Metrics) FenceStoreBatches(counts GroupCommits) {
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fencegate_store_batches_total",
			Help: "Batches of writes the fence store committed together (group commit): on Postgres, admissions and settles; on the embedded store, every write.",
		}, func() float64 { b, _ := counts(); return float64(b) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "fencegate_store_batched_writes_total",
			Help: "Writes those batches carried; divided by fencegate_store_batches_total, the writes per batch.",
		}, func() float64 { _, w := counts(); return float64(w) }),
	)
}

// CacheCounts reads the verified-token cache counters: hits skipped a
// signature check, misses paid for one, for grants and status proofs.
type CacheCounts func() (grantHits, grantMisses, statusHits, statusMisses uint64)

// ProofCache exposes the verified-token cache's hits and misses (the hit
// ratio is hits / (hits + misses)).
func (m *Metrics) ProofCache(counts CacheCounts) {
	for i, kind := range []string{"grant", "status"} {
		m.reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "fencegate_proof_cache_hits_total", ConstLabels: prometheus.Labels{"kind": kind},
				Help: "Grant and status-proof verifications served from the verified-token cache (no signature check), by kind.",
			}, func() float64 { return pick(counts, i, 0) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "fencegate_proof_cache_misses_total", ConstLabels: prometheus.Labels{"kind": kind},
				Help: "Grant and status-proof verifications that checked the signature (not in the cache), by kind.",
			}, func() float64 { return pick(counts, i, 1) }),
		)
	}
}

func pick(counts CacheCounts, kind, miss int) float64 {
	gh, gm, sh, sm := counts()
	return float64([4]uint64{gh, gm, sh, sm}[2*kind+miss])
}
