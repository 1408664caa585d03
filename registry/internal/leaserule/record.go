package leaserule

import (
	"time"

	"github.com/fencegate/fencegate"
)

// Record is a lease as the document-style backends (embedded, etcd) store it:
// the state written by the last mutation (HELD, RELEASED or EXPIRED) and
// times in Unix nanoseconds.
type Record struct {
	ID                string                `json:"id"`
	Resource          string                `json:"resource"`
	Owner             string                `json:"owner"`
	RequestID         string                `json:"requestId"`
	Fence             uint64                `json:"fence"`
	Revision          uint64                `json:"revision"`
	OperationID       string                `json:"operationId"`
	OperationRoot     string                `json:"operationRoot"`
	OperationCategory string                `json:"operationCategory"`
	State             fencegate.StatusState `json:"state"`
	TTL               int64                 `json:"ttlNs"`
	AcquiredAt        int64                 `json:"acquiredAtNs"`
	ExpiresAt         int64                 `json:"expiresAtNs"`
}

// NewRecord is the HELD record an accepted acquisition writes.
func NewRecord(req fencegate.AcquireRequest, fence, revision uint64) *Record {
	return &Record{
		ID: req.LeaseID, Resource: req.Resource, Owner: req.Owner, RequestID: req.RequestID,
		Fence: fence, Revision: revision, OperationID: req.OperationID, OperationRoot: req.OperationRoot,
		OperationCategory: req.OperationCategory, State: fencegate.StateHeld, TTL: int64(req.TTL),
		AcquiredAt: req.Now.UnixNano(), ExpiresAt: req.Now.Add(req.TTL).UnixNano(),
	}
}

// Lease is the record as a fencegate.Lease whose state is read at now.
func (r *Record) Lease(now time.Time) fencegate.Lease {
	exp := time.Unix(0, r.ExpiresAt).UTC()
	return fencegate.Lease{
		ID: r.ID, Resource: r.Resource, Owner: r.Owner, RequestID: r.RequestID, FenceToken: r.Fence,
		Revision: r.Revision, OperationID: r.OperationID, OperationRoot: r.OperationRoot,
		OperationCategory: r.OperationCategory, State: StateAt(r.State, exp, now),
		TTL: time.Duration(r.TTL), AcquiredAt: time.Unix(0, r.AcquiredAt).UTC(), ExpiresAt: exp,
	}
}
