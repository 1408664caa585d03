package registry

import (
	"context"
	"crypto/rand"
	"slices"
	"sync"

	"github.com/fencegate/fencegate"
)

// DelegateParams asks for a delegation of a lease to Delegate, for the
// segment range [SegmentFrom, SegmentTo] or the set Segments, optionally
// only for targets inside TargetPrefix. GrantDigest, when set, names which
// of the lease's grants it binds (default: the lease's current grant).
type DelegateParams struct {
	Delegate     string
	GrantDigest  string
	SegmentFrom  uint64
	SegmentTo    uint64
	Segments     []uint64
	TargetPrefix string
}

// IssuedDelegation is a signed delegation (compact JWS) and its claims.
type IssuedDelegation struct {
	Delegation fencegate.Delegation
	Token      string
}

// DelegationRecord is what the registry keeps of a delegation it minted:
// enough to answer its delegate's status requests and its owner's revocation.
type DelegationRecord struct {
	ID, Lease, Owner, Delegate string
	Revoked                    bool
}

// DelegationStore keeps the registry's delegation records. Get of an
// unknown ID is NOT_FOUND. A store that forgets a record (eviction, a
// restart of an in-memory store) only makes that delegation unusable: the
// registry issues no status proof for a delegation it does not know, so
// forgetting fails closed.
type DelegationStore interface {
	Put(ctx context.Context, rec DelegationRecord) error
	Get(ctx context.Context, id string) (DelegationRecord, error)
	Revoke(ctx context.Context, id string) error
}

// DelegationSigner is the Signer capability delegations need
// (proofs.Signer has it).
type DelegationSigner interface {
	SignDelegation(fencegate.Delegation) (string, error)
}

// DelegateAccess is the optional Access capability for delegates
// (authz.Policy has it): whether identity may write resource under a
// delegation. Without it, a delegate must be allowed to lease the resource.
type DelegateAccess interface {
	CheckDelegate(identity, resource string) error
}

// Delegate mints a signed delegation of owner's live lease leaseID. The
// lease must be owner's (OWNER_MISMATCH) and HELD (LEASE_NOT_HELD); the
// access policy must still let owner lease the resource and let the
// delegate write it as a delegate (FORBIDDEN); malformed parameters are
// DELEGATION_INVALID. The delegation binds the grant (digest, lease, fence,
// root) and is recorded, so its delegate can be issued status proofs and
// its owner can revoke it.
func (r *Registry) Delegate(ctx context.Context, owner, leaseID string, p DelegateParams) (IssuedDelegation, error) {
	a := r.auth.Issuing()
	ds, ok := a.Signer.(DelegationSigner)
	if !ok {
		return IssuedDelegation{}, fencegate.Errorf(fencegate.CodeUnsupported, "this registry's signer cannot sign delegations")
	}
	now := r.now()
	l, err := r.backend.Lease(ctx, leaseID, now)
	if err != nil {
		return IssuedDelegation{}, backendErr(err)
	}
	if l.Owner != owner {
		return IssuedDelegation{}, fencegate.Errorf(fencegate.CodeOwnerMismatch, "lease %s is not the caller's", l.ID)
	}
	if l.State != fencegate.StateHeld || r.preLoss(l) {
		return IssuedDelegation{}, fencegate.Errorf(fencegate.CodeLeaseNotHeld, "lease %s is %s: only a live lease can be delegated", l.ID, l.State)
	}
	digest := p.GrantDigest
	if digest == "" {
		if digest, err = a.digestFor(l, a.Epoch, a.PolicyGeneration); err != nil {
			return IssuedDelegation{}, fencegate.Wrap(err, fencegate.CodeInternal, "grant digest")
		}
	}
	st, err := r.attest(l, AttestRequest{Lease: l.ID, GrantDigest: digest}, a, 0)
	if err != nil {
		return IssuedDelegation{}, fencegate.Errorf(fencegate.CodeDelegationInvalid, "grantDigest is not a current grant of lease %s", l.ID)
	}
	if st.State != fencegate.StateHeld {
		return IssuedDelegation{}, fencegate.Errorf(fencegate.CodeLeaseNotHeld, "lease %s is stated %s", l.ID, st.State)
	}
	d := fencegate.Delegation{
		Schema: fencegate.DelegationSchema, ID: "dlg_" + rand.Text(), GrantDigest: digest,
		Resource: l.Resource, Lease: l.ID, Owner: l.Owner, Delegate: p.Delegate, FenceToken: l.FenceToken,
		OperationRoot: l.OperationRoot, SegmentFrom: p.SegmentFrom, SegmentTo: p.SegmentTo,
		Segments: p.Segments, TargetPrefix: p.TargetPrefix, IssuerEpoch: a.Epoch, IssuedAt: now.UnixMilli(),
	}
	if err := d.Validate(); err != nil {
		return IssuedDelegation{}, err
	}
	if r.access != nil {
		if err := r.access.CheckLease(owner, l.Resource); err != nil {
			return IssuedDelegation{}, err
		}
		if err := checkDelegate(r.access, p.Delegate, d); err != nil {
			return IssuedDelegation{}, err
		}
	}
	tok, err := ds.SignDelegation(d)
	if err != nil {
		return IssuedDelegation{}, fencegate.Wrap(err, fencegate.CodeInternal, "sign delegation")
	}
	if len(tok) > MaxDelegationToken {
		return IssuedDelegation{}, fencegate.Errorf(fencegate.CodeDelegationInvalid, "the delegation would be %d bytes, more than gateways accept (%d): use a segment range, a shorter prefix", len(tok), MaxDelegationToken)
	}
	if err := r.delegations.Put(ctx, DelegationRecord{ID: d.ID, Lease: l.ID, Owner: owner, Delegate: p.Delegate}); err != nil {
		return IssuedDelegation{}, backendErr(err)
	}
	return IssuedDelegation{Delegation: d, Token: tok}, nil
}

// checkDelegate asks acc whether delegate may write d's resource (its
// target prefix, when it has one) as a delegate.
func checkDelegate(acc Access, delegate string, d fencegate.Delegation) error {
	res := d.Resource
	if d.TargetPrefix != "" {
		res = d.TargetPrefix
	}
	if da, ok := acc.(DelegateAccess); ok {
		return da.CheckDelegate(delegate, res)
	}
	return acc.CheckLease(delegate, res)
}

// RevokeDelegation revokes owner's delegation id: from now on the registry
// issues its delegate no status proof (DELEGATION_INVALID), so gateways in
// query mode refuse it at once and gateways in proof mode within one status
// proof life. Revoking twice is not an error; another owner's delegation is
// OWNER_MISMATCH, an unknown one NOT_FOUND.
func (r *Registry) RevokeDelegation(ctx context.Context, owner, id string) error {
	rec, err := r.delegations.Get(ctx, id)
	if err != nil {
		return backendErr(err)
	}
	if rec.Owner != owner {
		return fencegate.Errorf(fencegate.CodeOwnerMismatch, "delegation %s is not the caller's", id)
	}
	return backendErr(r.delegations.Revoke(ctx, id))
}

// DelegationStatusRequest asks for a status proof of the grant GrantDigest
// names, for the delegate of delegation ID. Caller is the workload asking;
// it must be the delegate. Empty means a gateway identity asks (query mode),
// which may ask for any delegation; Delegate then, when set, must be the
// delegation's delegate.
type DelegationStatusRequest struct {
	ID, GrantDigest, Caller, Delegate string
}

// DelegationStatus states the delegation's grant now, as AttestStatus does
// for the owner, with the delegation's ID in the proof, and signs it. An
// unknown or revoked delegation is DELEGATION_INVALID; a caller that is not
// its delegate OWNER_MISMATCH. A lease no longer held is stated as it is
// (EXPIRED, RELEASED, REVOKED): the delegation died with it. Nothing is
// written.
func (r *Registry) DelegationStatus(ctx context.Context, req DelegationStatusRequest) (string, fencegate.Status, error) {
	a := r.auth.Issuing()
	st, err := r.delegationStatus(ctx, req, a, 0)
	if err != nil {
		return "", st, err
	}
	tok, err := a.Signer.SignStatus(st)
	if err != nil {
		return "", st, fencegate.Wrap(err, fencegate.CodeInternal, "sign status")
	}
	return tok, st, nil
}

// GrantDelegationStatus is the in-process query of a gateway in query mode
// for a delegated write: DelegationStatus, unsigned, for the verified grant g
// and delegation d.
func (r *Registry) GrantDelegationStatus(ctx context.Context, g fencegate.VerifiedGrant, d fencegate.Delegation) (fencegate.Status, error) {
	return r.delegationStatus(ctx, DelegationStatusRequest{ID: d.ID, GrantDigest: g.Digest, Delegate: d.Delegate}, r.auth.Issuing(), g.PolicyGeneration)
}

func (r *Registry) delegationStatus(ctx context.Context, req DelegationStatusRequest, a Issuing, olderGen uint64) (fencegate.Status, error) {
	rec, err := r.delegations.Get(ctx, req.ID)
	switch {
	case fencegate.ErrorCode(err) == fencegate.CodeNotFound:
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeDelegationInvalid, "delegation %s is unknown to the registry", req.ID)
	case err != nil:
		return fencegate.Status{}, backendErr(err)
	case req.Caller != "" && req.Caller != rec.Delegate:
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeOwnerMismatch, "delegation %s is not the caller's", req.ID)
	case req.Delegate != "" && req.Delegate != rec.Delegate:
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeDelegationInvalid, "delegation %s names another delegate", req.ID)
	case rec.Revoked:
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeDelegationInvalid, "delegation %s is revoked", req.ID)
	}
	l, err := r.readForStatus(ctx, rec.Lease)
	if err != nil {
		return fencegate.Status{}, err
	}
	st, err := r.attest(l, AttestRequest{Lease: l.ID, GrantDigest: req.GrantDigest, Owner: rec.Owner}, a, olderGen)
	if err != nil {
		return fencegate.Status{}, err
	}
	st.Delegation = rec.ID
	return st, nil
}

// MaxDelegationToken is the largest delegation minted: the default token
// size cap of gateways' verifiers (proofs.DefaultMaxTokenSize).
const MaxDelegationToken = 8 << 10

// DefaultDelegationCapacity is how many delegations the in-memory store
// keeps; beyond it one is forgotten (and so refused), see MemoryDelegations.
const DefaultDelegationCapacity = 1 << 16

// MemoryDelegations is the in-memory DelegationStore: a registry restart
// forgets every delegation (its delegates are refused and need new ones).
// It holds at most its capacity; when full, the record forgotten is the
// oldest of the owner holding the most (ties: by owner), so an owner that
// mints without end forgets its own delegations, never another owner's
// while it holds more than they do.
type MemoryDelegations struct {
	mu       sync.Mutex
	capacity int
	byID     map[string]*DelegationRecord
	byOwner  map[string][]*DelegationRecord // oldest first
}

// NewMemoryDelegations returns an empty store of the given capacity
// (DefaultDelegationCapacity when not positive).
func NewMemoryDelegations(capacity int) *MemoryDelegations {
	if capacity <= 0 {
		capacity = DefaultDelegationCapacity
	}
	return &MemoryDelegations{capacity: capacity, byID: map[string]*DelegationRecord{}, byOwner: map[string][]*DelegationRecord{}}
}

// Put records rec (replacing a record of the same ID).
func (m *MemoryDelegations) Put(_ context.Context, rec DelegationRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.byID[rec.ID]; ok {
		m.forget(old)
	}
	e := &rec
	m.byID[rec.ID] = e
	m.byOwner[rec.Owner] = append(m.byOwner[rec.Owner], e)
	for len(m.byID) > m.capacity {
		m.evict()
	}
	return nil
}

// evict forgets the oldest record of the owner holding the most.
func (m *MemoryDelegations) evict() {
	victim, most := "", 0
	for owner, list := range m.byOwner {
		if len(list) > most || (len(list) == most && owner < victim) {
			victim, most = owner, len(list)
		}
	}
	m.forget(m.byOwner[victim][0])
}

func (m *MemoryDelegations) forget(e *DelegationRecord) {
	delete(m.byID, e.ID)
	list := slices.DeleteFunc(m.byOwner[e.Owner], func(x *DelegationRecord) bool { return x == e })
	if len(list) == 0 {
		delete(m.byOwner, e.Owner)
	} else {
		m.byOwner[e.Owner] = list
	}
}

// Get returns the record of id, NOT_FOUND if unknown.
func (m *MemoryDelegations) Get(_ context.Context, id string) (DelegationRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.byID[id]; ok {
		return *e, nil
	}
	return DelegationRecord{}, fencegate.Errorf(fencegate.CodeNotFound, "no delegation %s", id)
}

// Revoke marks id revoked; NOT_FOUND if unknown.
func (m *MemoryDelegations) Revoke(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byID[id]
	if !ok {
		return fencegate.Errorf(fencegate.CodeNotFound, "no delegation %s", id)
	}
	e.Revoked = true
	return nil
}
