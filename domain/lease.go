package domain

import (
	"context"
	"time"
)

// Lease is the registry's record of one acquisition. FenceToken comes from a
// linearizable per-resource sequence moved in the same transaction as the lease.
type Lease struct {
	ID                string        `json:"lease"`
	Resource          string        `json:"resource"`
	Owner             string        `json:"owner"`
	RequestID         string        `json:"requestId"`
	FenceToken        uint64        `json:"fenceToken"`
	Revision          uint64        `json:"revision"`
	OperationID       string        `json:"operationId"`
	OperationRoot     string        `json:"operationRoot"`
	OperationCategory string        `json:"operationCategory"`
	State             StatusState   `json:"state"`
	TTL               time.Duration `json:"-"`
	AcquiredAt        time.Time     `json:"acquiredAt"`
	ExpiresAt         time.Time     `json:"expiresAt"`
}

// AcquireRequest asks for a lease on Resource. LeaseID is the ID a new lease
// gets; a repeated (Owner, RequestID) returns the existing lease instead.
type AcquireRequest struct {
	LeaseID           string
	Resource          string
	Owner             string
	RequestID         string
	OperationID       string
	OperationRoot     string
	OperationCategory string
	TTL               time.Duration
	Now               time.Time
	// Guard is checked in the same transaction as the fence.
	Guard
}

// Guard is what a registry expects of its backend, checked inside each
// mutation's own transaction (acquire, renew, release, floor, prune) before
// it changes anything. Incarnation, when not empty, is the marker the backend must
// carry, and MinRevision the highest revision the registry has seen there:
// a backend carrying another marker (or none) or a lower revision lost or
// rolled back its state, and the mutation is COORDINATION_STATE_LOST,
// deciding nothing, moving no revision and issuing no fence. Guarding every
// mutation, not only acquisitions, is what keeps renewals and releases on a
// restored copy from raising its revision back to the one seen, which would
// hide the rollback from the next acquire and let it issue a lost fence
// again.
type Guard struct {
	Incarnation string
	MinRevision uint64
}

// Incarnation is one life of a coordination backend's fence state: a marker
// written by the registry that claimed the backend, stored with the fences so
// that it vanishes, or goes back in time, together with them.
type Incarnation struct {
	// ID is the marker; "" when the backend carries none (never claimed, or
	// emptied: a restart without persistence, a new or switched backend).
	ID string `json:"id"`
	// Since is the revision at which ID was written; leases of lower
	// revisions were issued before the claim.
	Since uint64 `json:"since"`
	// Revision is the backend's global revision, moved by every mutation in
	// the same transaction: an older copy restored shows a lower one.
	Revision uint64 `json:"revision"`
	// HighestFence is the highest fence the backend has handed out on any
	// resource, or its floor when that is higher.
	HighestFence uint64 `json:"highestFence"`
}

// LeaseBackend is a coordination backend of the registry. All times are the
// registry's clock, passed in as now; state is computed against it (a HELD lease
// past ExpiresAt reads as EXPIRED).
//
//   - Acquire is idempotent by (Owner, RequestID): a repeat with the same
//     Resource, TTL, OperationID, OperationRoot and OperationCategory returns
//     the first lease, one with any of them different is REQUEST_ID_CONFLICT
//     and changes nothing; a resource held by another
//     live lease gives LEASE_HELD; every new lease gets a fence above every
//     earlier fence of the resource and above the floor.
//   - Renew extends a HELD lease of owner by ttl; LEASE_NOT_HELD otherwise.
//   - Release ends a HELD lease of owner; releasing twice is not an error.
//     released is true only for the call that ended the lease (it was HELD
//     and is now RELEASED); a lease no longer held (released, expired,
//     revoked) is returned as it is, with released false, so that of a
//     release and its retries exactly one reports it, decided in the same
//     transaction as the change.
//   - Acquire, Renew, Release, SetFloor and Prune check their Guard first,
//     in their own transaction: COORDINATION_STATE_LOST, changing nothing,
//     when it fails.
//   - Prune deletes, in one transaction, up to the backend's batch (the one
//     an acquisition prunes) of lease records forgotten at now under its
//     retention (no longer held, past expiry + retention), with their
//     request IDs, and returns how many. It moves no revision and writes
//     no marker, floor or fence: a copy restored from before it differs only
//     in records already forgotten, and a prune on a restored or foreign
//     copy can never raise its revision back to one a registry saw.
//   - Lease reads one lease; NOT_FOUND if unknown.
//   - SetFloor makes every later fence of every resource greater than floor;
//     a floor that leaves fewer than MinFenceHeadroom fences below the
//     backend's limit is INVALID_REQUEST.
//   - Incarnation reads the marker, revision and highest fence in one
//     consistent read.
//   - Claim, in one transaction, raises the floor to at least floor, writes a
//     new marker id (Since = the revision of this write) and returns the new
//     incarnation; COORDINATION_STATE_LOST if the current marker is not prev,
//     so two registries cannot both claim one loss.
type LeaseBackend interface {
	Acquire(ctx context.Context, req AcquireRequest) (Lease, error)
	Renew(ctx context.Context, id, owner string, ttl time.Duration, now time.Time, g Guard) (Lease, error)
	Release(ctx context.Context, id, owner string, now time.Time, g Guard) (l Lease, released bool, err error)
	Lease(ctx context.Context, id string, now time.Time) (Lease, error)
	SetFloor(ctx context.Context, floor uint64, g Guard) error
	Incarnation(ctx context.Context) (Incarnation, error)
	Claim(ctx context.Context, prev, id string, floor uint64) (Incarnation, error)
	Prune(ctx context.Context, now time.Time, g Guard) (int, error)
	Close() error
}

// MinFenceHeadroom is how many fences a floor must leave below a backend's
// limit: a floor closer to the end of the sequence would make acquisitions
// fail for good.
const MinFenceHeadroom = 1 << 32

// LeaseHolders is an optional LeaseBackend capability: the live lease of a
// resource. Holder returns the resource's HELD lease at now, or NOT_FOUND
// when no live lease holds it (never held, released, expired, revoked).
type LeaseHolders interface {
	Holder(ctx context.Context, resource string, now time.Time) (Lease, error)
}
