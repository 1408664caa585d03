package embedded

import (
	"encoding/binary"
	"encoding/json"
	"time"

	"github.com/fencegate/fencegate"
)

// record is a lease as stored: the state written by the last mutation
// (HELD, RELEASED or EXPIRED) and times in Unix nanoseconds.
type record struct {
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

// lease is the record as a fencegate.Lease whose state is read at now.
func (r *record) lease(now time.Time) fencegate.Lease {
	l := fencegate.Lease{
		ID:                r.ID,
		Resource:          r.Resource,
		Owner:             r.Owner,
		RequestID:         r.RequestID,
		FenceToken:        r.Fence,
		Revision:          r.Revision,
		OperationID:       r.OperationID,
		OperationRoot:     r.OperationRoot,
		OperationCategory: r.OperationCategory,
		TTL:               time.Duration(r.TTL),
		AcquiredAt:        time.Unix(0, r.AcquiredAt).UTC(),
		ExpiresAt:         time.Unix(0, r.ExpiresAt).UTC(),
	}
	l.State = stateAt(r.State, l.ExpiresAt, now)
	return l
}

// resourceRecord is the per-resource sequence: the last fence handed out and
// the lease that took it (empty once released).
type resourceRecord struct {
	LastFence uint64
	Current   string
}

func (r resourceRecord) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, r.LastFence)
	return append(b, r.Current...)
}

func decodeResource(b []byte) (resourceRecord, error) {
	if len(b) < 8 {
		return resourceRecord{}, fencegate.Errorf(fencegate.CodeInternal, "corrupt resource record")
	}
	return resourceRecord{LastFence: binary.BigEndian.Uint64(b), Current: string(b[8:])}, nil
}

// requestKey indexes a lease by (owner, request ID); the owner is length-prefixed
// so no pair of strings can collide.
func requestKey(owner, requestID string) []byte {
	k := binary.AppendUvarint(nil, uint64(len(owner)))
	k = append(k, owner...)
	return append(k, requestID...)
}

func encodeRecord(r *record) ([]byte, error) { return json.Marshal(r) }

func decodeRecord(b []byte) (*record, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInternal, "corrupt lease record")
	}
	return &r, nil
}
