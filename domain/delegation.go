package domain

import (
	"fmt"
	"slices"
)

// DelegationSchema is the schema of a signed delegation.
const DelegationSchema = "leaseDelegation.v1"

// MaxDelegationSegments bounds the explicit segment set of a delegation, so
// that a signed delegation stays well inside a verifier's token size cap
// (8 KiB by default) whatever its numbers; a longer run is a range.
const MaxDelegationSegments = 128

// Delegation is the payload of a leaseDelegation.v1 JWS: the owner of a live
// lease lets one named downstream identity (Delegate) write under its grant,
// for the segments of an explicit range [SegmentFrom, SegmentTo] or set
// (Segments), and optionally only for targets inside TargetPrefix (a
// resource subtree within the grant's resource). It binds the grant by
// digest, lease, fence and root: it says nothing about whether the lease is
// still held, which the grant's status does (a delegation dies with its
// lease). The registry signs it with the grant's issuer key; the gateway
// trusts it only after package proofs verified it against the same trust
// bundle and rules as a grant.
type Delegation struct {
	Schema        string   `json:"schema"`
	ID            string   `json:"id"`
	GrantDigest   string   `json:"grantDigest"`
	Resource      string   `json:"resource"`
	Lease         string   `json:"lease"`
	Owner         string   `json:"owner"`
	Delegate      string   `json:"delegate"`
	FenceToken    uint64   `json:"fenceToken"`
	OperationRoot string   `json:"operationRoot"`
	SegmentFrom   uint64   `json:"segmentFrom,omitempty"`
	SegmentTo     uint64   `json:"segmentTo,omitempty"`
	Segments      []uint64 `json:"segments,omitempty"`
	TargetPrefix  string   `json:"targetPrefix,omitempty"`
	IssuerEpoch   uint64   `json:"issuerEpoch"`
	IssuedAt      int64    `json:"issuedAt"`
}

// Validate checks that the delegation's claims mean something: every binding
// present, exactly one of a segment range (1 <= from <= to) or a set (1 to
// MaxDelegationSegments distinct numbers >= 1), and a target prefix, if any,
// that is a canonical name inside the resource. It returns a
// DELEGATION_INVALID error naming the first problem.
func (d *Delegation) Validate() error {
	bad := func(format string, args ...any) error {
		return Errorf(CodeDelegationInvalid, "delegation "+format, args...)
	}
	switch {
	case d.Schema != DelegationSchema:
		return bad("schema must be %q", DelegationSchema)
	case d.ID == "":
		return bad("has no id")
	case d.GrantDigest == "":
		return bad("has no grantDigest")
	case d.Resource == "" || d.Lease == "" || d.Owner == "":
		return bad("needs resource, lease and owner")
	case d.Delegate == "":
		return bad("names no delegate")
	case d.FenceToken == 0 || d.OperationRoot == "":
		return bad("needs fenceToken and operationRoot")
	case d.IssuedAt <= 0:
		return bad("has no issuedAt")
	}
	if err := CheckDelegatedSegments(d.SegmentFrom, d.SegmentTo, d.Segments); err != nil {
		return err
	}
	if d.TargetPrefix != "" {
		if err := CheckName(d.TargetPrefix); err != nil {
			return bad("targetPrefix: %s", ErrorMessage(err))
		}
		if !Covers(d.Resource, d.TargetPrefix) {
			return bad("targetPrefix %q is outside the resource %q", d.TargetPrefix, d.Resource)
		}
	}
	return nil
}

// CheckDelegatedSegments checks the segments a delegation names: exactly
// one of a range [from, to] with 1 <= from <= to, or a set (from and to 0)
// of 1 to MaxDelegationSegments distinct numbers, each at least 1 (segments
// number from 1). It returns a DELEGATION_INVALID error naming the first
// problem. Validate applies it to a delegation's claims (so the registry
// mints and a gateway accepts no other); a caller may check what it is about
// to ask for with it, before asking.
func CheckDelegatedSegments(from, to uint64, set []uint64) error {
	bad := func(format string, args ...any) error {
		return Errorf(CodeDelegationInvalid, "delegated segments: "+format, args...)
	}
	hasRange := from != 0 || to != 0
	switch {
	case hasRange == (len(set) > 0):
		return bad("need exactly one of a range (segmentFrom, segmentTo) or a set (segments), numbered from 1")
	case hasRange && (from == 0 || to < from):
		return bad("the range [%d, %d] is empty or starts below 1", from, to)
	case len(set) > MaxDelegationSegments:
		return bad("the set lists %d segments, more than %d (a longer run is a range)", len(set), MaxDelegationSegments)
	}
	seen := make(map[uint64]bool, len(set))
	for _, s := range set {
		if s == 0 || seen[s] {
			return bad("the set has a zero or repeated segment (%d)", s)
		}
		seen[s] = true
	}
	return nil
}

// CoversSegment reports whether seg is one of the delegated segments.
func (d *Delegation) CoversSegment(seg uint64) bool {
	if len(d.Segments) > 0 {
		return slices.Contains(d.Segments, seg)
	}
	return seg >= d.SegmentFrom && seg <= d.SegmentTo
}

// CoversTarget reports whether the canonical resource a request targets lies
// inside the delegation's target prefix (always, without one).
func (d *Delegation) CoversTarget(resource string) bool {
	return d.TargetPrefix == "" || Covers(d.TargetPrefix, resource)
}

// BindsGrant checks that the delegation was made for exactly the grant g
// (digest, resource, lease, owner, fence, root). It returns a
// DELEGATION_INVALID error naming the first claim that differs.
func (d *Delegation) BindsGrant(g VerifiedGrant) error {
	var claim string
	switch {
	case g.Digest == "" || d.GrantDigest != g.Digest:
		claim = "grantDigest"
	case d.Resource != g.Resource:
		claim = "resource"
	case d.Lease != g.Lease:
		claim = "lease"
	case d.Owner != g.Owner:
		claim = "owner"
	case d.FenceToken != g.FenceToken:
		claim = "fenceToken"
	case d.OperationRoot != g.OperationRoot:
		claim = "operationRoot"
	default:
		return nil
	}
	return Errorf(CodeDelegationInvalid, "delegation %s: its %s is not the grant's", d.ID, claim)
}

// SegmentsText describes the delegated segments for messages.
func (d *Delegation) SegmentsText() string {
	if len(d.Segments) > 0 {
		return fmt.Sprint(d.Segments)
	}
	return fmt.Sprintf("[%d, %d]", d.SegmentFrom, d.SegmentTo)
}
