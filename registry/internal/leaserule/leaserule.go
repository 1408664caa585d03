// Package leaserule holds the rules every lease backend applies the same way:
// request validation, the state of a lease at an instant, and the next fence.
package leaserule

import (
	"math"
	"time"

	"github.com/fencegate/fencegate"
)

// MaxFieldLength bounds the owner, request ID, lease ID and operation fields, in bytes.
const MaxFieldLength = 512

// CheckAcquire returns INVALID_REQUEST unless req names a lease ID, resource,
// owner and request ID, all within MaxFieldLength (the resource within
// fencegate.MaxNameLength), and a positive TTL.
func CheckAcquire(req fencegate.AcquireRequest) error {
	switch {
	case req.LeaseID == "", req.Resource == "", req.Owner == "", req.RequestID == "":
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "acquire needs lease ID, resource, owner and request ID")
	case req.TTL <= 0:
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "acquire needs a positive TTL")
	case len(req.Resource) > fencegate.MaxNameLength:
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "resource longer than %d bytes", fencegate.MaxNameLength)
	}
	for _, s := range []string{req.LeaseID, req.Owner, req.RequestID, req.OperationID, req.OperationRoot, req.OperationCategory} {
		if len(s) > MaxFieldLength {
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "acquire field longer than %d bytes", MaxFieldLength)
		}
	}
	return nil
}

// CheckTTL returns INVALID_REQUEST unless ttl is positive.
func CheckTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "TTL must be positive")
	}
	return nil
}

// StateAt is the state of a lease stored as stored with expiry expires, read at
// now: a HELD lease is EXPIRED from ExpiresAt on.
func StateAt(stored fencegate.StatusState, expires, now time.Time) fencegate.StatusState {
	if stored == fencegate.StateHeld && !now.Before(expires) {
		return fencegate.StateExpired
	}
	return stored
}

// NextFence is the fence a new lease gets: one above both the resource's last
// fence and the floor. It fails with INTERNAL when the uint64 space (or limit,
// for stores with a narrower type) is exhausted.
func NextFence(last, floor, limit uint64) (uint64, error) {
	base := max(last, floor)
	if base >= limit || base == math.MaxUint64 {
		return 0, fencegate.Errorf(fencegate.CodeInternal, "fence sequence exhausted")
	}
	return base + 1, nil
}

// SameRequest checks a repeated acquisition (same owner and request ID)
// against the lease the first one made: REQUEST_ID_CONFLICT unless resource,
// TTL, operation ID, operation root and category are all the same, so a
// client bug never gets another operation's lease back.
func SameRequest(l fencegate.Lease, req fencegate.AcquireRequest) error {
	var differ string
	switch {
	case l.Resource != req.Resource:
		differ = "resource"
	case l.TTL != req.TTL:
		differ = "TTL"
	case l.OperationID != req.OperationID:
		differ = "operation ID"
	case l.OperationRoot != req.OperationRoot:
		differ = "operation root"
	case l.OperationCategory != req.OperationCategory:
		differ = "operation category"
	default:
		return nil
	}
	return fencegate.Errorf(fencegate.CodeRequestIDConflict,
		"request ID %q was already used with another %s (lease %s); use a new request ID for a new acquisition", req.RequestID, differ, l.ID)
}

// CheckFloor refuses (INVALID_REQUEST) a floor that leaves fewer than
// fencegate.MinFenceHeadroom fences below limit, the backend's highest fence.
func CheckFloor(floor, limit uint64) error {
	if floor > limit-fencegate.MinFenceHeadroom {
		return fencegate.Errorf(fencegate.CodeInvalidRequest,
			"floor %d leaves fewer than %d fences below the backend's limit %d: the sequence would run out", floor, uint64(fencegate.MinFenceHeadroom), limit)
	}
	return nil
}

// CheckClaim refuses (INVALID_REQUEST) the arguments of a Claim before any
// backend reads: a floor CheckFloor refuses against limit, or an empty
// incarnation ID.
func CheckClaim(id string, floor, limit uint64) error {
	if err := CheckFloor(floor, limit); err != nil {
		return err
	}
	if id == "" {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "claim needs an incarnation ID")
	}
	return nil
}

// CheckIncarnation is the guard of a mutation (fencegate.Guard):
// COORDINATION_STATE_LOST when g expects a marker and the backend carries
// another (cur) or a revision below g.MinRevision.
func CheckIncarnation(g fencegate.Guard, cur string, revision uint64) error {
	switch {
	case g.Incarnation == "":
		return nil
	case cur != g.Incarnation:
		return fencegate.Errorf(fencegate.CodeStateLost, "the coordination backend carries incarnation %q, not %q: its state was lost or replaced", cur, g.Incarnation)
	case revision < g.MinRevision:
		return fencegate.Errorf(fencegate.CodeStateLost, "the coordination backend is at revision %d, below %d already seen: it was rolled back", revision, g.MinRevision)
	}
	return nil
}

// ClaimLost is the COORDINATION_STATE_LOST of a claim whose expected
// previous marker is not the backend's.
func ClaimLost(prev, cur string) error {
	return fencegate.Errorf(fencegate.CodeStateLost, "claim expected incarnation %q, the backend carries %q: another registry claimed it", prev, cur)
}

// Mismatch checks a renew or release of lease l by owner: OWNER_MISMATCH when
// owner is not the holder.
func Mismatch(l fencegate.Lease, owner string) error {
	if l.Owner != owner {
		return fencegate.Errorf(fencegate.CodeOwnerMismatch, "lease %s is not owned by the caller", l.ID)
	}
	return nil
}
