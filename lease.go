package fencegate

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
//   - Lease reads one lease; NOT_FOUND if unknown.
//   - SetFloor makes every later fence of every resource greater than floor.
type LeaseBackend interface {
	Acquire(ctx context.Context, req AcquireRequest) (Lease, error)
	Renew(ctx context.Context, id, owner string, ttl time.Duration, now time.Time) (Lease, error)
	Release(ctx context.Context, id, owner string, now time.Time) (Lease, error)
	Lease(ctx context.Context, id string, now time.Time) (Lease, error)
	SetFloor(ctx context.Context, floor uint64) error
	Close() error
}
