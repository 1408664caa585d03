package embedded

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/fencegate/fencegate"
)

// Keys (package doc, Layout): parts joined by a 0x00 byte, numbers
// big-endian, times in an order-preserving form.

// stateKey is the by-state key of r in state.
func stateKey(state fencegate.ReceiptState, r *fencegate.Receipt) []byte {
	return join([]byte(state), timeKey(r.CreatedAt), []byte(r.ID))
}

// liveKey is the byres key of the live receipt of resource's fence and
// segment: after every by-resource key of the resource (1 > 0), the newest
// fence and segment first.
func liveKey(resource string, fence, segment uint64) []byte {
	k := make([]byte, 0, len(resource)+17)
	k = append(append(k, resource...), 1)
	k = binary.BigEndian.AppendUint64(k, ^fence)
	return binary.BigEndian.AppendUint64(k, ^segment)
}

// splitLiveKey returns the parts of a byres key made by liveKey; ok is
// false for a by-resource key (resource 0 createdAt receipt ID).
func splitLiveKey(k []byte) (resource []byte, fence, segment uint64, ok bool) {
	i := bytes.IndexByte(k, 1)
	if i < 0 || len(k) != i+17 || bytes.IndexByte(k[:i], 0) >= 0 {
		return nil, 0, 0, false
	}
	return k[:i], ^binary.BigEndian.Uint64(k[i+1:]), ^binary.BigEndian.Uint64(k[i+9:]), true
}

// join concatenates key parts: the first, a 0x00 separator, then the rest.
func join(first []byte, rest ...[]byte) []byte {
	n := len(first) + 1
	for _, p := range rest {
		n += len(p)
	}
	k := make([]byte, 0, n)
	k = append(k, first...)
	k = append(k, 0)
	for _, p := range rest {
		k = append(k, p...)
	}
	return k
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// timeKey encodes t in 12 bytes so that byte order is time order, for every
// time (Unix seconds with the sign bit flipped, then nanoseconds).
func timeKey(t time.Time) []byte {
	k := binary.BigEndian.AppendUint64(nil, uint64(t.Unix())^1<<63)
	return binary.BigEndian.AppendUint32(k, uint32(t.Nanosecond()))
}
