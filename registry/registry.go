// Package registry is the lease registry: it hands out leases with fence
// tokens from a LeaseBackend and turns them into signed grants and short-lived
// status proofs. All times come from the injected clock; a client's clock is
// never consulted. It imports no driver: backends live in sub-packages.
package registry

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
	"github.com/fencegate/fencegate/s3cred"
)

// Default TTL bounds of an acquisition or renewal.
const (
	DefaultMinTTL = 100 * time.Millisecond
	DefaultMaxTTL = time.Hour
)

// Retention of lease records and request IDs by every backend
// (leaserule.Forgotten): the default, and the shortest a backend accepts.
const (
	DefaultLeaseRetention = leaserule.DefaultRetention
	MinLeaseRetention     = leaserule.MinRetention
)

// Signer turns grants and status payloads into compact JWS tokens. SignGrant
// returns the token and its digest: "sha256:" + hex of SHA-256 over the exact
// payload bytes signed.
type Signer interface {
	SignGrant(fencegate.Grant) (token, digest string, err error)
	SignStatus(fencegate.Status) (string, error)
}

// Config configures a Registry. Backend and Signer (or Authority) are required; zero values
// of the rest take the documented defaults.
type Config struct {
	Backend fencegate.LeaseBackend
	// Signer signs grants and proofs unless Authority is set.
	Signer Signer
	// Now is the registry's clock (default time.Now).
	Now func() time.Time
	// NewID returns a fresh, unique lease ID (default: random, 130 bits).
	NewID func() string
	// IssuerEpoch and PolicyGeneration are stamped into every grant.
	IssuerEpoch, PolicyGeneration uint64
	// Authority, when set, supplies signer, epoch, policy generation and
	// revoked epochs instead of Signer, IssuerEpoch and PolicyGeneration,
	// which are then ignored: operator state changes there, not here.
	Authority Authority
	// StatusLife is the life of a status proof: default
	// fencegate.DefaultStatusLife, at most fencegate.MaxStatusLife.
	StatusLife time.Duration
	// MinTTL and MaxTTL bound requested TTLs (defaults DefaultMinTTL,
	// DefaultMaxTTL); MinTTL is at least a millisecond, the grant's resolution.
	MinTTL, MaxTTL time.Duration
	// Access, when set, decides which owners may lease which resources: an
	// acquisition or renewal it refuses is FORBIDDEN and changes nothing.
	Access Access
	// HighWater is the fence store the gateways share: after a loss of
	// coordination state the registry resumes above the highest fence it
	// reports. Nil: the registry cannot know it, and an operator floor is
	// needed to resume (see SetFloor).
	HighWater fencegate.HighWater
	// Memory keeps what the registry saw of its backend across restarts.
	Memory Memory
	// OnLoss retires epoch, the issuer epoch signing when a loss was
	// detected (rotate to a new key if it still signs, revoke it); grants
	// stay paused until it succeeds, and every retry names the same epoch.
	// It is never called from SetFloor.
	OnLoss func(ctx context.Context, epoch uint64) error
	// Handoff, if set, is told of each lock handoff this process sees (old
	// lease ended -> new grant).
	Handoff HandoffObserver
	// Log receives the loss, claim, floor and resume events (default: none).
	Log *slog.Logger
	// S3, when set, derives leases' S3 credentials (S3Credentials,
	// ResolveS3); nil: none are issued (UNSUPPORTED).
	S3 *s3cred.Deriver
	// Delegations keeps the delegations the registry minted (default: a
	// MemoryDelegations of DefaultDelegationCapacity).
	Delegations DelegationStore
}

// TTLBounds returns the bounds New enforces on requested TTLs: MinTTL and
// MaxTTL, each DefaultMinTTL or DefaultMaxTTL when zero. It is the one place
// those defaults are resolved; it does not validate them (New does).
func (c Config) TTLBounds() (minTTL, maxTTL time.Duration) {
	minTTL, maxTTL = c.MinTTL, c.MaxTTL
	if minTTL == 0 {
		minTTL = DefaultMinTTL
	}
	if maxTTL == 0 {
		maxTTL = DefaultMaxTTL
	}
	return minTTL, maxTTL
}

// Access is the part of the authorization policy the registry applies
// (authz.Policy implements it).
type Access interface {
	CheckLease(identity, resource string) error
}

// Registry issues and tracks leases. It is safe for concurrent use; every
// operation is one backend call, so it is linearizable when the backend is.
// Once Check has run, every acquire carries the backend's incarnation and
// the highest revision seen, so a backend that lost or rolled back its state
// issues no fence; grants then pause until the registry has claimed the
// backend above every known fence and every pre-loss status proof expired.
type Registry struct {
	backend    fencegate.LeaseBackend
	auth       Authority
	released   releases
	now        func() time.Time
	newID      func() string
	statusLife time.Duration
	minTTL     time.Duration
	maxTTL     time.Duration
	access     Access
	rec        recovery
	fences     fencegate.HighWater
	memory     Memory
	onLoss     func(ctx context.Context, epoch uint64) error
	log        *slog.Logger
	s3         *s3cred.Deriver
	handoffObs HandoffObserver
	handoff    handoffEnds

	delegations DelegationStore
}

// New validates cfg and returns a Registry. It reports every problem at once,
// joined, each an INVALID_REQUEST *fencegate.Error.
func New(cfg Config) (*Registry, error) {
	r := &Registry{
		backend: cfg.Backend, now: cfg.Now, newID: cfg.NewID,
		auth:       cfg.Authority,
		statusLife: cfg.StatusLife, access: cfg.Access,
		fences: cfg.HighWater, memory: cfg.Memory, onLoss: cfg.OnLoss, log: cfg.Log, s3: cfg.S3,
		handoffObs: cfg.Handoff, handoff: newHandoffEnds(),
		delegations: cfg.Delegations,
	}
	if r.delegations == nil {
		r.delegations = NewMemoryDelegations(0)
	}
	if r.log == nil {
		r.log = discard
	}
	if r.auth == nil && cfg.Signer != nil {
		r.auth = StaticAuthority{Signer: cfg.Signer, Epoch: cfg.IssuerEpoch, PolicyGeneration: cfg.PolicyGeneration}
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.newID == nil {
		r.newID = func() string { return "lease_" + rand.Text() }
	}
	if r.statusLife == 0 {
		r.statusLife = fencegate.DefaultStatusLife
	}
	r.minTTL, r.maxTTL = cfg.TTLBounds()
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fencegate.Errorf(fencegate.CodeInvalidRequest, "registry config: "+format, args...))
	}
	if r.backend == nil {
		bad("Backend is required")
	}
	if r.auth == nil {
		bad("Signer or Authority is required")
	}
	if r.statusLife < 0 || r.statusLife > fencegate.MaxStatusLife {
		bad("StatusLife %v outside (0, %v]", r.statusLife, fencegate.MaxStatusLife)
	}
	if r.minTTL < time.Millisecond {
		bad("MinTTL %v below 1ms", r.minTTL)
	}
	if r.maxTTL < r.minTTL {
		bad("MaxTTL %v below MinTTL %v", r.maxTTL, r.minTTL)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

// Acquire takes a lease on p.Resource for owner and returns it with its signed
// grant and a fresh status proof, if Access lets owner lease it (else
// FORBIDDEN, and nothing is acquired). Asking again with the same (owner,
// RequestID) and the same parameters returns the same lease, fence and grant
// payload, whatever its state now; a repeat whose resource, TTL, operation ID,
// root or category differ is REQUEST_ID_CONFLICT and changes nothing.
func (r *Registry) Acquire(ctx context.Context, owner string, p AcquireParams) (Issued, error) {
	if err := r.checkAcquire(owner, &p); err != nil {
		return Issued{}, err
	}
	if r.access != nil {
		if err := r.access.CheckLease(owner, p.Resource); err != nil {
			return Issued{}, err
		}
	}
	now := r.now()
	req := fencegate.AcquireRequest{
		LeaseID: r.newID(), Resource: p.Resource, Owner: owner, RequestID: p.RequestID,
		OperationID: p.OperationID, OperationRoot: p.OperationRoot, OperationCategory: p.OperationCategory,
		TTL: p.TTL, Now: now,
	}
	var l fencegate.Lease
	err := r.underGuard(ctx, now, func() (fencegate.Guard, error) { return r.guard(ctx, now) }, func(g fencegate.Guard) (err error) {
		req.Guard = g
		l, err = r.backend.Acquire(ctx, req)
		return err
	})
	if err != nil {
		return Issued{}, backendErr(err)
	}
	r.observe(l)
	if err := r.rememberIssued(l); err != nil {
		return Issued{}, err // the lease is kept: asking again with the request ID returns it
	}
	r.granted(l, req.LeaseID)
	return r.issue(l, now)
}

// Renew extends owner's held lease to now+ttl, if Access still lets owner
// lease its resource (else FORBIDDEN, and the lease runs out) and the lease
// was not issued before a coordination state loss (else LEASE_NOT_HELD: it
// reads REVOKED, and runs out). The grant keeps its original
// times; the fresh status proof is what proves the lease still lives.
func (r *Registry) Renew(ctx context.Context, owner, leaseID string, ttl time.Duration) (Issued, error) {
	if err := r.checkTTL(ttl); err != nil {
		return Issued{}, err
	}
	// The check first, so that preLoss below knows the marker's Since.
	if err := r.checkedFirst(ctx); err != nil {
		return Issued{}, err
	}
	now := r.now()
	if was, err := r.backend.Lease(ctx, leaseID, now); err == nil && was.Owner == owner {
		if r.access != nil { // the policy may have changed since the acquisition
			if err := r.access.CheckLease(owner, was.Resource); err != nil {
				return Issued{}, err
			}
		}
		// A lease from before a coordination state loss reads REVOKED; it
		// is not renewed either, or its owner could hold the resource for
		// as long as it keeps renewing.
		if r.preLoss(was) {
			return Issued{}, fencegate.Errorf(fencegate.CodeLeaseNotHeld, "lease %s was issued before a coordination state loss: it is revoked, acquire again", leaseID)
		}
	}
	var l fencegate.Lease
	err := r.underGuard(ctx, now, r.mutationGuard(ctx), func(g fencegate.Guard) (err error) {
		l, err = r.backend.Renew(ctx, leaseID, owner, ttl, now, g)
		return err
	})
	if err != nil {
		return Issued{}, backendErr(err)
	}
	r.observeBackend(ctx)
	return r.issue(l, now)
}

// Release ends owner's lease; releasing a lease that is no longer held
// returns it unchanged. Only the call that ended the lease (as the backend
// reports it, not a retry finding it RELEASED already) marks the start of a
// handoff.
func (r *Registry) Release(ctx context.Context, owner, leaseID string) (fencegate.Lease, error) {
	now := r.now()
	var l fencegate.Lease
	var released bool
	err := r.underGuard(ctx, now, r.mutationGuard(ctx), func(g fencegate.Guard) (err error) {
		l, released, err = r.backend.Release(ctx, leaseID, owner, now, g)
		return err
	})
	if err == nil {
		r.observeBackend(ctx)
		if released {
			r.ended(l.Resource, now)
		}
		r.released.wake(l.Resource)
	}
	return l, backendErr(err)
}

// Status reads the lease now and returns it with its grant and a fresh status
// proof, signed whatever the state.
func (r *Registry) Status(ctx context.Context, leaseID string) (Issued, error) {
	now := r.now()
	l, err := r.backend.Lease(ctx, leaseID, now)
	if err != nil {
		return Issued{}, backendErr(err)
	}
	return r.issue(l, now)
}

// backendErr keeps *fencegate.Error as it is and wraps anything else as INTERNAL.
func backendErr(err error) error {
	var fe *fencegate.Error
	if err == nil || errors.As(err, &fe) {
		return err
	}
	return fencegate.Wrap(err, fencegate.CodeInternal, "lease backend")
}

// Holder returns the live (HELD) lease of resource now, NOT_FOUND if none,
// or UNSUPPORTED when the backend cannot tell (fencegate.LeaseHolders).
func (r *Registry) Holder(ctx context.Context, resource string) (fencegate.Lease, error) {
	hb, ok := r.backend.(fencegate.LeaseHolders)
	if !ok {
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeUnsupported, "this registry backend cannot name a resource's live lease")
	}
	l, err := hb.Holder(ctx, resource, r.now())
	return l, backendErr(err)
}
