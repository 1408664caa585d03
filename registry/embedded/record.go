package embedded

import (
	"encoding/binary"
	"encoding/json"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// record is a lease as stored.
type record = leaserule.Record

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
