package embedded

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"time"

	"github.com/fencegate/fencegate"
)

// The value encoding of receipts and resource states.
//
// Files written before it hold JSON (what encoding/json makes of the domain
// types, always starting with '{'); values written now start with a codec
// byte instead, and the readers take both, so an old file keeps working and
// is rewritten value by value as its receipts and resources change. The
// compact form is a fixed sequence of fields: strings and byte strings as a
// uvarint length and the bytes, unsigned numbers as uvarints, signed ones as
// varints, times as the varint Unix seconds and the uvarint nanoseconds
// (read back in UTC: a time is kept as an instant, as Postgres keeps it), and
// the rare API-effect parts (Response, Request) as a length-prefixed JSON
// document. A decoded value shares one string allocation for all its text.
//
// A receipt (codec byte 2) ends with room: a byte string, of settleRoom
// zeros while the receipt is not settled for good and empty after, so that
// the settle, which adds a version token (the local store's is 83 bytes), a
// settle time and a longer state, rewrites it no larger than it was: the
// receipts' leaf pages, split full since their IDs grow in time order, are
// then not split again by the settles of the receipts they hold. Receipts
// of codec byte 1 (the same without room) are still read.
//
// A receipt's LandBy, when it has one, follows its creation time (flag
// fLandBy); a binary from before that flag fails to read such a receipt
// (INTERNAL: the time's bytes are not the room it expects), never taking it
// for another.
//
// A delegated write's receipt (flag fDelegated) keeps its delegate and
// delegation ID as two strings just before the room; a receipt without the
// flag (every receipt written before it, and the owner's own writes) reads
// back with both "". A binary from before that flag fails to read such a
// receipt (INTERNAL: it takes the delegate for the room and finds bytes
// left over), never taking it for another.
//
// Quarantine records, rare and written once, stay JSON (encodeQuarantine).
// A delegated write's record adds its delegate and delegationId members
// (flagged by their presence); an owner's record leaves them out, so it is
// written byte for byte as before them and every record written before
// reads back with both "". A binary from before them ignores members it
// does not know: it reads such a record without its delegate (as it shows
// every record) and, if it counts a repeat on it, rewrites it without them.
// It is never an error to it: that would fail its quarantine lists and the
// QUARANTINED answer of the repeat.

// settleRoom is the room an unsettled receipt keeps for its settle.
const settleRoom = 104

// Codec bytes (never '{', which starts JSON): codecV1 for resource states and
// the first receipts of the compact form, codecV2 for receipts with room.
const (
	codecV1 = 0x01
	codecV2 = 0x02
)

// Receipt flag bits.
const (
	fResend = 1 << iota
	fRetryAt
	fSettledAt
	fResponse
	fRequest
	fLandBy
	fDelegated
)

var errShortValue = errors.New("value ends early")

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	b = binary.AppendVarint(b, t.Unix())
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}

func appendJSON(b []byte, v any) ([]byte, error) {
	doc, err := json.Marshal(v)
	if err != nil {
		return b, err
	}
	b = binary.AppendUvarint(b, uint64(len(doc)))
	return append(b, doc...), nil
}

// encodeReceipt is r in the compact form.
func encodeReceipt(r *fencegate.Receipt) ([]byte, error) {
	n := 60 + len(r.ID) + len(r.Resource) + len(r.Target) + len(r.Method) + len(r.OperationID) + len(r.OperationRoot) +
		len(r.Lease) + len(r.Owner) + len(r.GrantDigest) + len(r.PayloadDigest) + len(r.EffectKey) + len(r.State) +
		len(r.Version) + len(r.Error) + len(r.Delegate) + len(r.DelegationID)
	if !r.State.Terminal() {
		n += settleRoom
	}
	b := make([]byte, 0, n)
	b = append(b, codecV2)
	for _, s := range [...]string{r.ID, r.Resource, r.Target, r.Method, r.OperationID, r.OperationRoot, r.Lease, r.Owner,
		r.GrantDigest, r.PayloadDigest, r.EffectKey, string(r.State), r.Version, r.Error} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, r.FenceToken)
	b = binary.AppendUvarint(b, r.Segment)
	b = binary.AppendVarint(b, int64(r.Attempts))
	var flags byte
	if r.Resend {
		flags |= fResend
	}
	if r.RetryAt != nil {
		flags |= fRetryAt
	}
	if r.SettledAt != nil {
		flags |= fSettledAt
	}
	if r.Response != nil {
		flags |= fResponse
	}
	if r.Request != nil {
		flags |= fRequest
	}
	if !r.LandBy.IsZero() {
		flags |= fLandBy
	}
	delegated := r.Delegate != "" || r.DelegationID != ""
	if delegated {
		flags |= fDelegated
	}
	b = append(b, flags)
	b = appendTime(b, r.CreatedAt)
	if !r.LandBy.IsZero() {
		b = appendTime(b, r.LandBy)
	}
	if r.RetryAt != nil {
		b = appendTime(b, *r.RetryAt)
	}
	if r.SettledAt != nil {
		b = appendTime(b, *r.SettledAt)
	}
	var err error
	if r.Response != nil {
		if b, err = appendJSON(b, r.Response); err != nil {
			return nil, err
		}
	}
	if r.Request != nil {
		if b, err = appendJSON(b, r.Request); err != nil {
			return nil, err
		}
	}
	if delegated {
		b = appendString(b, r.Delegate)
		b = appendString(b, r.DelegationID)
	}
	if r.State.Terminal() {
		return append(b, 0), nil
	}
	b = binary.AppendUvarint(b, settleRoom)
	return append(b, make([]byte, settleRoom)...), nil
}

// encodeResource is row in the compact form.
func encodeResource(row *fencegate.ResourceState) []byte {
	b := make([]byte, 0, 40+len(row.Resource)+len(row.Root)+len(row.Lease)+len(row.PendingReceipt))
	b = append(b, codecV1)
	for _, s := range [...]string{row.Resource, row.Root, row.Lease, row.PendingReceipt} {
		b = appendString(b, s)
	}
	b = binary.AppendUvarint(b, row.HighestFence)
	b = binary.AppendUvarint(b, row.LastSegmentSeq)
	b = binary.AppendVarint(b, row.GrantIssuedAt)
	return appendTime(b, row.UpdatedAt)
}

// reader walks a compact value; the first error sticks, and every later read
// returns a zero value.
type reader struct {
	text string // the whole value, once, for the strings to share
	off  int
	err  error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errShortValue
	}
	r.off = len(r.text)
}

func (r *reader) uvarint() uint64 {
	var v uint64
	var shift uint
	for i := r.off; i < len(r.text) && shift < 64; i++ {
		c := r.text[i]
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			r.off = i + 1
			return v
		}
		shift += 7
	}
	r.fail()
	return 0
}

func (r *reader) varint() int64 {
	u := r.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (r *reader) byte() byte {
	if r.off >= len(r.text) {
		r.fail()
		return 0
	}
	c := r.text[r.off]
	r.off++
	return c
}

func (r *reader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.text)-r.off) {
		r.fail()
		return ""
	}
	s := r.text[r.off : r.off+int(n)]
	r.off += int(n)
	return s
}

func (r *reader) time() time.Time {
	sec := r.varint()
	nsec := r.uvarint()
	if nsec >= 1e9 {
		if r.err == nil {
			r.err = errors.New("time with nanoseconds out of range")
		}
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}

func (r *reader) json(v any) {
	doc := r.string()
	if r.err == nil {
		r.err = json.Unmarshal([]byte(doc), v)
	}
}

// done reports the first error, or one for bytes left over.
func (r *reader) done() error {
	if r.err == nil && r.off != len(r.text) {
		return errors.New("value has bytes left over")
	}
	return r.err
}

// decodeReceipt reads a receipt in either form into r.
func decodeReceipt(v []byte, r *fencegate.Receipt) error {
	if len(v) == 0 || (v[0] != codecV1 && v[0] != codecV2) {
		return json.Unmarshal(v, r)
	}
	rd := reader{text: string(v), off: 1}
	*r = fencegate.Receipt{
		ID: rd.string(), Resource: rd.string(), Target: rd.string(), Method: rd.string(),
		OperationID: rd.string(), OperationRoot: rd.string(), Lease: rd.string(), Owner: rd.string(),
		GrantDigest: rd.string(), PayloadDigest: rd.string(), EffectKey: rd.string(),
		State: fencegate.ReceiptState(rd.string()), Version: rd.string(), Error: rd.string(),
	}
	r.FenceToken = rd.uvarint()
	r.Segment = rd.uvarint()
	r.Attempts = int(rd.varint())
	flags := rd.byte()
	r.Resend = flags&fResend != 0
	r.CreatedAt = rd.time()
	if flags&fLandBy != 0 {
		r.LandBy = rd.time()
	}
	if flags&fRetryAt != 0 {
		t := rd.time()
		r.RetryAt = &t
	}
	if flags&fSettledAt != 0 {
		t := rd.time()
		r.SettledAt = &t
	}
	if flags&fResponse != 0 {
		r.Response = new(fencegate.EffectResponse)
		rd.json(r.Response)
	}
	if flags&fRequest != 0 {
		r.Request = new(fencegate.EffectRequest)
		rd.json(r.Request)
	}
	if flags&fDelegated != 0 {
		r.Delegate = rd.string()
		r.DelegationID = rd.string()
	}
	if v[0] == codecV2 {
		rd.string() // the room kept for the settle
	}
	return rd.done()
}

// decodeResource reads a resource state in either form into row.
func decodeResource(v []byte, row *fencegate.ResourceState) error {
	if len(v) == 0 || v[0] != codecV1 {
		return json.Unmarshal(v, row)
	}
	rd := reader{text: string(v), off: 1}
	*row = fencegate.ResourceState{Resource: rd.string(), Root: rd.string(), Lease: rd.string(), PendingReceipt: rd.string()}
	row.HighestFence = rd.uvarint()
	row.LastSegmentSeq = rd.uvarint()
	row.GrantIssuedAt = rd.varint()
	row.UpdatedAt = rd.time()
	return rd.done()
}
