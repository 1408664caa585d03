package domain

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// Bounds of a page of any list (receipts, unknown outcomes, quarantine,
// enforcement modes, leases).
const (
	// DefaultPageLimit is the number of items a page holds when no limit is asked.
	DefaultPageLimit = 100
	// MaxPageLimit is the most items one page may hold; a larger limit is refused.
	MaxPageLimit = 1000
	// MaxPageBytes bounds the approximate size of one page of receipts or
	// quarantine records (a receipt may keep a request and an answer of up to
	// a MiB each): a page ends early, with a cursor, once it holds this much,
	// and always holds at least one item.
	MaxPageBytes = 4 << 20
)

// Page asks for one page of a list: at most Limit items after the position
// Cursor names. Lists are in a fixed order (for receipts: creation time, then
// receipt ID), so following Next from page to page sees every item that stays
// in the list exactly once, whatever is added or removed meanwhile.
type Page struct {
	// Cursor is "" for the first page, else a Next of the same list.
	Cursor string
	// Limit is the most items wanted: 0 means DefaultPageLimit; it must not
	// exceed MaxPageLimit.
	Limit int
}

// Size is the number of items the page may hold: Limit, or DefaultPageLimit
// for 0, at most MaxPageLimit.
func (p Page) Size() int {
	switch {
	case p.Limit <= 0:
		return DefaultPageLimit
	case p.Limit > MaxPageLimit:
		return MaxPageLimit
	}
	return p.Limit
}

// Check refuses a negative limit or one above MaxPageLimit (INVALID_REQUEST).
func (p Page) Check() error {
	if p.Limit < 0 || p.Limit > MaxPageLimit {
		return Errorf(CodeInvalidRequest, "limit must be between 1 and %d, not %d", MaxPageLimit, p.Limit)
	}
	return nil
}

// ReceiptPage is one page of receipts. Next is the cursor of the following
// page, "" when this is the last.
type ReceiptPage struct {
	Receipts []Receipt `json:"receipts"`
	Next     string    `json:"next,omitempty"`
}

// QuarantinePage is one page of quarantine records.
type QuarantinePage struct {
	Records []Quarantine `json:"quarantine"`
	Next    string       `json:"next,omitempty"`
}

// Position is where a page ends in a list: the sort key of its last item.
// Group is the first sort key where a list has one (the resource, for the
// quarantine of every resource), At the item's time, ID its unique name.
type Position struct {
	Group string
	At    time.Time
	ID    string
}

// Cursor encodes p as an opaque cursor bound to list (a name of the list and
// its filter, e.g. "receipts/operation/" + operation ID): a cursor of one
// list is refused by another.
func (p Position) Cursor(list string) string {
	b := listTag(list)
	b = binary.BigEndian.AppendUint64(b, uint64(p.At.UnixMicro()))
	b = binary.AppendUvarint(b, uint64(len(p.Group)))
	b = append(b, p.Group...)
	b = append(b, p.ID...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ParseCursor decodes a cursor made by Position.Cursor for the same list. ""
// is the start (ok false, no error); a cursor that is malformed or of another
// list is INVALID_REQUEST.
func ParseCursor(list, cursor string) (p Position, ok bool, err error) {
	if cursor == "" {
		return Position{}, false, nil
	}
	bad := Errorf(CodeInvalidRequest, "cursor is not one this list handed out")
	b, derr := base64.RawURLEncoding.DecodeString(cursor)
	tag := listTag(list)
	if derr != nil || len(b) < len(tag)+8 || string(b[:len(tag)]) != string(tag) {
		return Position{}, false, bad
	}
	b = b[len(tag):]
	p.At = time.UnixMicro(int64(binary.BigEndian.Uint64(b))).UTC()
	b = b[8:]
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return Position{}, false, bad
	}
	p.Group = string(b[k : k+int(n)])
	p.ID = string(b[k+int(n):])
	if p.ID == "" {
		return Position{}, false, bad
	}
	return p, true, nil
}

// After reports whether an item at (group, at, id) comes after p in list order.
func (p Position) After(group string, at time.Time, id string) bool {
	if group != p.Group {
		return group > p.Group
	}
	if !at.Equal(p.At) {
		return at.After(p.At)
	}
	return id > p.ID
}

// listTag is the first bytes of a cursor: a digest of the list's name.
func listTag(list string) []byte {
	h := sha256.Sum256([]byte("fencegate/cursor/v1\x00" + list))
	return []byte(hex.EncodeToString(h[:4]))
}

// ReceiptPosition is the position of r in a list of receipts.
func ReceiptPosition(r *Receipt) Position { return Position{At: r.CreatedAt, ID: r.ID} }

// QuarantinePosition is the position of q in a quarantine list.
func QuarantinePosition(q *Quarantine) Position {
	return Position{Group: q.Resource, At: q.At, ID: q.ID}
}

// ApproxSize is roughly how many bytes r takes in a JSON answer: its fixed
// fields plus the kept request and answer (base64 bodies count 4/3).
func (r *Receipt) ApproxSize() int {
	n := 600 + len(r.ID) + len(r.Resource) + 2*len(r.Target) + len(r.OperationID) + len(r.OperationRoot) +
		len(r.Lease) + len(r.Owner) + len(r.GrantDigest) + len(r.PayloadDigest) + len(r.Version) + len(r.Error)
	if q := r.Request; q != nil {
		n += len(q.Path) + len(q.Key) + len(q.Body)*4/3
		for k, vs := range q.Header {
			n += len(k)
			for _, v := range vs {
				n += len(v) + 8
			}
		}
	}
	if a := r.Response; a != nil {
		n += len(a.Body) * 4 / 3
		for k, v := range a.Header {
			n += len(k) + len(v) + 8
		}
	}
	return n
}
