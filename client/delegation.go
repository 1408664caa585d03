package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/domain"
)

// DelegateParams asks for a delegation of a lease to Delegate (a downstream
// workload identity) for the segment range [SegmentFrom, SegmentTo] or the
// set Segments, optionally only for targets inside TargetPrefix.
type DelegateParams struct {
	Delegate     string
	SegmentFrom  uint64
	SegmentTo    uint64
	Segments     []uint64
	TargetPrefix string
}

// Delegation is a minted delegation: ID, the signed token a delegate sends
// as Fence-Delegation with the grant, and its claims.
type Delegation = domain.DelegationAnswer

// Delegate is one POST /v1/leases/{lease}/delegations for the grant named by
// grantDigest ("" for the lease's current grant). Only the lease's owner is
// answered; see Lease.Delegate.
func (c *Client) Delegate(ctx context.Context, lease, grantDigest string, p DelegateParams) (Delegation, error) {
	var out Delegation
	err := c.do(ctx, request{op: "delegate", method: "POST", path: "/v1/leases/" + escapeID(lease) + "/delegations",
		json: domain.DelegationRequest{Delegate: p.Delegate, GrantDigest: grantDigest, SegmentFrom: p.SegmentFrom,
			SegmentTo: p.SegmentTo, Segments: p.Segments, TargetPrefix: p.TargetPrefix}}, &out)
	return out, err
}

// RevokeDelegation is DELETE /v1/delegations/{id}: the registry issues the
// delegate no status proof from now on, so gateways refuse its writes within
// one status proof life (at once in query mode).
func (c *Client) RevokeDelegation(ctx context.Context, id string) error {
	return c.do(ctx, request{op: "revoke delegation", method: "DELETE", path: "/v1/delegations/" + escapeID(id)}, nil)
}

// DelegationStatus is POST /v1/delegations/{id}/status, asked by the
// delegate: a status proof for the delegation's grant, stating the lease as
// it is now (a delegation dies with its lease).
func (c *Client) DelegationStatus(ctx context.Context, id, grantDigest string) (domain.DelegationStatusAnswer, error) {
	var out domain.DelegationStatusAnswer
	err := c.do(ctx, request{op: "delegation status", method: "POST", path: "/v1/delegations/" + escapeID(id) + "/status",
		json: domain.DelegationStatusRequest{GrantDigest: grantDigest}, limit: maxRegistryAnswer}, &out)
	return out, err
}

// Delegate mints a delegation of this lease's current grant. It refuses
// without asking while the lease is not HELD locally, and unless the
// segments run without a hole from NextSegment (CheckDelegable): below it
// they are the lease's own, and past it a skipped segment would stall both
// the owner and the delegate. A segment in doubt is settled first (a
// write whose answer was lost may hold it; MUTATION_UNKNOWN while it is
// unsettled). No commit of the lease's own runs while the delegation is
// minted, and once minted the lease's own writers number their commits
// after the highest delegated segment: owner and delegate never send the
// same segment number.
func (l *Lease) Delegate(ctx context.Context, p DelegateParams) (Delegation, error) {
	l.lockCommit()
	defer l.unlockCommit()
	if err := l.live(); err != nil {
		return Delegation{}, err
	}
	list, err := l.resume(ctx)
	if err != nil {
		return Delegation{}, err
	}
	if l.doubt != nil {
		if _, _, err := l.settleDoubt(ctx, list, "", nil); err != nil {
			return Delegation{}, err
		}
	}
	top, err := CheckDelegable(p, l.nextSeg)
	if err != nil {
		return Delegation{}, err
	}
	info := l.Info()
	d, err := l.c.Delegate(ctx, info.Lease, info.GrantDigest, p)
	if err != nil {
		return d, err
	}
	l.nextSeg = max(l.nextSeg, top+1)
	return d, nil
}

// CheckDelegable refuses (INVALID_REQUEST) delegating p's segments unless
// they run without a hole from next, the lease's next segment: a segment
// below next is the lease's own (written, or in doubt), and handed out,
// owner and delegate would share its number; a segment skipped (a range
// starting past next, or a set with a hole) would belong to nobody, and
// since the gateway admits only the segment after the last one, neither
// the delegate nor the owner could write again. It returns the highest
// segment p names, after which the owner's own commits number. Segments
// that no delegation may name (domain.CheckDelegatedSegments: neither or
// both of a range and a set, an empty range, a set too long or with a
// repeat) are refused first, DELEGATION_INVALID, as the registry would.
func CheckDelegable(p DelegateParams, next uint64) (top uint64, err error) {
	if err := domain.CheckDelegatedSegments(p.SegmentFrom, p.SegmentTo, p.Segments); err != nil {
		return 0, err
	}
	low, top := p.SegmentFrom, p.SegmentTo
	set := slices.Clone(p.Segments)
	slices.Sort(set)
	if len(set) > 0 {
		low, top = set[0], set[len(set)-1]
	}
	if low < next {
		return 0, domain.Errorf(domain.CodeInvalidRequest,
			"segment %d is this lease's own (its next segment is %d): delegate segments from %d on", low, next, next)
	}
	for i := 1; i < len(set); i++ {
		if set[i] != set[i-1]+1 {
			return 0, domain.Errorf(domain.CodeInvalidRequest,
				"segment %d is missing from the delegated set: the gateway admits segments in order, so the delegate could not write past it and the owner could not fill it; delegate %d-%d", set[i-1]+1, low, top)
		}
	}
	if low > next {
		return 0, domain.Errorf(domain.CodeInvalidRequest,
			"segments %d-%d would belong to nobody (this lease's next segment is %d, and the gateway admits segments in order): delegate segments from %d on", next, low-1, next, next)
	}
	return top, nil
}

// DelegationClaims reads the claims of a compact leaseDelegation.v1 JWS
// without verifying it (the gateway verifies it): a delegate learns which
// delegation, grant and segments it was given.
func DelegationClaims(token string) (domain.Delegation, error) {
	var d domain.Delegation
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return d, domain.Errorf(domain.CodeDelegationInvalid, "delegation is not a compact JWS")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(b, &d) != nil {
		return domain.Delegation{}, domain.Errorf(domain.CodeDelegationInvalid, "delegation payload is unreadable")
	}
	if err := d.Validate(); err != nil {
		return domain.Delegation{}, err
	}
	return d, nil
}

// ResumeAt sets the segment number the lease's next commit carries: for an
// owner that takes back delegated segments its delegate never used (after
// revoking the delegation). The gateway admits only the next segment, so a
// wrong number is refused (SEGMENT_OUT_OF_ORDER, or QUARANTINED for a used
// one), never applied twice.
func (l *Lease) ResumeAt(seg uint64) {
	l.lockCommit()
	defer l.unlockCommit()
	if seg > 0 {
		l.nextSeg = seg
	}
}
