// Package gateway is the acceptance point (applyFencedMutation). It verifies a
// request's grant and status, binds them to the caller and the target, admits
// the segment through a FenceStore in one transaction, forwards the effect, and
// settles the receipt. It imports no HTTP, SQL or SDK package.
//
// Guarantees: a request that fails authentication or binding touches no stored
// state; at most one effect per resource is in flight in this process (and, via
// the store's pending mark, across replicas); an effect is forwarded only after
// its receipt is durably PENDING, and its outcome is recorded before answering.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencegate/fencegate"
)

// GrantVerifier checks grants and status proofs against a fixed trust bundle.
type GrantVerifier interface {
	VerifyGrant(token string) (fencegate.VerifiedGrant, error)
	VerifyStatus(token string, g fencegate.VerifiedGrant) (fencegate.Status, error)
}

// StatusQuerier answers a linearizable status query for a grant (query mode).
type StatusQuerier interface {
	GrantStatus(ctx context.Context, g fencegate.VerifiedGrant) (fencegate.Status, error)
}

// DelegationVerifier is the GrantVerifier capability delegated writes need
// (proofs.Verifier has it): a delegation verified and bound to its grant, and
// a status proof issued for that delegation.
type DelegationVerifier interface {
	VerifyDelegation(token string, g fencegate.VerifiedGrant) (fencegate.Delegation, error)
	VerifyDelegationStatus(token string, g fencegate.VerifiedGrant, delegation string) (fencegate.Status, error)
}

// DelegationQuerier is the StatusQuerier capability delegated writes need in
// query mode: the grant's status for delegation d, which the registry
// refuses (DELEGATION_INVALID) once d is revoked or unknown to it.
type DelegationQuerier interface {
	GrantDelegationStatus(ctx context.Context, g fencegate.VerifiedGrant, d fencegate.Delegation) (fencegate.Status, error)
}

// DelegateAccess is the optional Access capability for delegates
// (authz.Policy has it); without it a delegate must be allowed to lease.
type DelegateAccess interface {
	CheckDelegate(identity, resource string) error
}

// Policy tells the gateway the current policy generation and revoked epochs.
type Policy interface {
	PolicyGeneration() uint64
	EpochRevoked(epoch uint64) bool
}

// Access is the part of the authorization policy the acceptance point
// applies (authz.Policy implements it).
type Access interface {
	CheckLease(identity, resource string) error
}

// Alarm is told about events an operator must see: fence regressions, and
// refusals that shadow mode let through.
type Alarm interface {
	FenceRegression(resource string, fence uint64, err error)
	// ShadowVerdict: pattern is the configured mode pattern that put the
	// resource in shadow mode.
	ShadowVerdict(resource, pattern string, code fencegate.Code)
}

// Config builds a Gateway.
type Config struct {
	Verifier GrantVerifier
	// Querier, when set, replaces status proofs with a registry query.
	Querier StatusQuerier
	// Confirm, when set in proof mode, also asks the registry (in process:
	// one lease read) about the first segment of every grant, the write that
	// raises a resource's fence: a grant whose lease vanished with lost
	// coordination state is refused even while its status proof is fresh.
	// Later segments rely on the proof alone.
	Confirm StatusQuerier
	Store   fencegate.FenceStore
	Policy  Policy
	// Access, when set, is re-checked at every write: the caller must still
	// be allowed to lease the grant's resource (else FORBIDDEN, which shadow
	// mode never forwards).
	Access Access
	Alarm  Alarm
	// Observe is told how admissions, effects and settles went (default:
	// nothing), for metrics.
	Observe Observer
	// Tracer makes the spans of verification, admission, effect and settle
	// (nil: none, at no cost).
	Tracer trace.TracerProvider
	// Modes is the enforcement mode per resource pattern (nil: enforce all).
	Modes *Modes
	Now   func() time.Time
	NewID func() string
	Log   *slog.Logger
	// Resolver, when set, picks the resolver of a target: a replayed segment
	// whose receipt is UNKNOWN is settled through it before it is answered.
	Resolver func(target string) Resolver
	// EffectTimeout bounds one forwarded effect (default 60 s).
	EffectTimeout time.Duration
	// After waits between retries of a settle that failed, between polls
	// of a busy resource and for a deferred settle's window (DeferSettle)
	// (default time.After); tests inject it so that no test sleeps.
	After func(time.Duration) <-chan time.Time
	// Go starts a background task (default: a goroutine); a simulation
	// runs it under its own scheduler.
	Go func(func())
	// Journal keeps the recent refusals the console shows (nil: a new
	// Journal of DefaultJournalSize).
	Journal *Journal
	// DeferSettle, when positive, defers the settle of a COMMITTED object
	// PUT (docs/deferred-settle.md): the write is answered once the object
	// store holds it, and the settle is folded into the next admission on
	// the resource in this process (a PriorSettling store) or flushed after
	// this window. 0 settles every receipt before answering.
	DeferSettle time.Duration
	// Block waits until ch is closed (default: a receive): an admission
	// waiting for a deferred settle in flight. A simulation waits under its
	// own scheduler.
	Block func(ch <-chan struct{})
	// Background is the context of the gateway's background store calls
	// (deferred flushes, settle retries); default context.Background(). Once
	// it ends they stop trying (call Drain first: what is left is proven or
	// reconciled as after a crash). The app ends it before the store
	// closes; a simulation tags it with the process, so that a crash ends
	// them.
	Background context.Context
	// Failpoint, when set, is called at named points ("after-effect": the
	// effect returned, its receipt is not yet settled) so tests can crash the
	// process exactly there.
	Failpoint func(name string)
}

// Gateway is the acceptance point. It is safe for concurrent use.
type Gateway struct {
	cfg     Config
	tracer  trace.Tracer
	locks   keyedMutex
	retry   settleRetry
	journal *Journal
	// deferred holds the answered settles not yet durable; folds is true
	// when the store takes them into an admission (PriorSettling).
	deferred deferrals
	folds    bool
	// shadowLost is this process's shadow forwards whose outcome is not
	// known or whose version could not be recorded, by target (shadow.go):
	// only their objects' versions are adopted.
	shadowLost lostShadows
	// refused: resources whose last admission here was refused, whose
	// writes are not staged (stage.go).
	refused refusedSet
	// writing counts the writes between their admission's start and their
	// answer (stage.go).
	writing atomic.Int64
}

// New returns a Gateway; it reports every missing part at once.
func New(cfg Config) (*Gateway, error) {
	var missing []string
	if cfg.Verifier == nil {
		missing = append(missing, "Verifier")
	}
	if cfg.Store == nil {
		missing = append(missing, "Store")
	}
	if cfg.Policy == nil {
		missing = append(missing, "Policy")
	}
	if len(missing) > 0 {
		return nil, fencegate.Errorf(fencegate.CodeInternal, "gateway config lacks %v", missing)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = func() string { return NewOrderedID("rcpt_", time.Now()) }
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.EffectTimeout <= 0 {
		cfg.EffectTimeout = defaultEffectTimeout
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	if cfg.Go == nil {
		cfg.Go = func(f func()) { go f() }
	}
	if cfg.Block == nil {
		cfg.Block = func(ch <-chan struct{}) { <-ch }
	}
	if cfg.Background == nil {
		cfg.Background = context.Background()
	}
	if cfg.Journal == nil {
		cfg.Journal = NewJournal(0)
	}
	if cfg.Observe == nil {
		cfg.Observe = NopObserver{}
	}
	var tracer trace.Tracer
	// A noop provider (tracing off) is no tracer: its spans record nothing,
	// and startSpan then costs nothing. Its Start would keep the caller's
	// span in the context, which the context already has.
	if _, off := cfg.Tracer.(noop.TracerProvider); cfg.Tracer != nil && !off {
		tracer = cfg.Tracer.Tracer("github.com/fencegate/fencegate/gateway")
	}
	ps, ok := cfg.Store.(fencegate.PriorSettling)
	return &Gateway{cfg: cfg, journal: cfg.Journal, tracer: tracer, folds: ok && ps.SettlesPrior(),
		deferred: deferrals{observe: cfg.Observe.Deferred, off: cfg.DeferSettle <= 0},
		retry:    settleRetry{ctx: cfg.Background, store: cfg.Store, after: cfg.After, spawn: cfg.Go, log: cfg.Log}}, nil
}

// UnsettledOutcomes is the number of known effect outcomes still waiting to
// be recorded because the fence store failed when they were settled; they are
// retried in the background until the store takes them.
func (g *Gateway) UnsettledOutcomes() int { return g.retry.len() }

// Modes returns the gateway's enforcement modes (nil if none were configured).
func (g *Gateway) Modes() *Modes { return g.cfg.Modes }

// Store returns the gateway's fence store as readers must see it: a read of
// a receipt (or resource) whose settle this process deferred flushes it
// first, and a PENDING object receipt that its object proves is settled
// COMMITTED as it is read (readStore). Writes pass through.
func (g *Gateway) Store() fencegate.FenceStore { return readStore{FenceStore: g.cfg.Store, g: g} }

// NewID returns prefix followed by 26 random hex characters.
func NewID(prefix string) string {
	b := make([]byte, 13)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// NewOrderedID returns prefix followed by 26 hex characters, as NewID, of
// which the first 12 are now's Unix time in milliseconds and the other 14
// random (56 bits): IDs made later sort after earlier ones (to the
// millisecond), so a store's index of receipts by ID grows at its end instead
// of touching a random page per new receipt (an embedded store of 150,000
// receipts wrote 13.6 pages per fenced write with random IDs, 9.6 with
// ordered ones: fencestore/embedded BenchmarkWriteCost). Uniqueness rests on
// the random part within one millisecond; an ID says when it was made, which
// a receipt shows anyway (createdAt).
func NewOrderedID(prefix string, now time.Time) string {
	var b [13]byte
	ms := uint64(now.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:])
	return prefix + hex.EncodeToString(b[:])
}

// StaticPolicy is a fixed Policy.
type StaticPolicy struct {
	Generation uint64
	Revoked    map[uint64]bool
}

// PolicyGeneration returns the fixed generation.
func (p StaticPolicy) PolicyGeneration() uint64 { return p.Generation }

// EpochRevoked reports whether epoch is in the revoked set.
func (p StaticPolicy) EpochRevoked(epoch uint64) bool { return p.Revoked[epoch] }

// defaultEffectTimeout is Config.EffectTimeout's default.
const defaultEffectTimeout = 60 * time.Second
