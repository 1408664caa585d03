package gateway

import "github.com/fencegate/fencegate"

// delegation verifies a delegated request's Fence-Delegation before its
// status: signed under the grant's trust bundle and rules, bound to the
// grant vg (digest, lease, owner, fence, root), of an unrevoked epoch, naming
// the caller as its delegate, covering the request's segment and target. It
// returns nil for a request without one. It reads and writes nothing: the
// delegated write then meets the owner's status, fence and segment rules
// unchanged.
func (g *Gateway) delegation(req Request, vg fencegate.VerifiedGrant) (*fencegate.Delegation, error) {
	if req.DelegationToken == "" {
		return nil, nil
	}
	dv, ok := g.cfg.Verifier.(DelegationVerifier)
	if !ok {
		return nil, fencegate.Errorf(fencegate.CodeUnsupported, "this gateway's verifier cannot check delegations")
	}
	d, err := dv.VerifyDelegation(req.DelegationToken, vg)
	if err != nil {
		return nil, asCode(err, fencegate.CodeDelegationInvalid)
	}
	switch {
	case req.AssignSegment:
		return nil, fencegate.Errorf(fencegate.CodeDelegationInvalid, "a delegated write names its segment: the gateway does not number it")
	case g.cfg.Policy.EpochRevoked(d.IssuerEpoch):
		return nil, fencegate.Errorf(fencegate.CodeEpochRevoked, "delegation of revoked issuer epoch %d", d.IssuerEpoch)
	case req.Caller != d.Delegate:
		return nil, fencegate.Errorf(fencegate.CodeOwnerMismatch, "caller %q is not the delegate the delegation names", req.Caller)
	case !d.CoversSegment(req.Segment):
		return nil, fencegate.Errorf(fencegate.CodeDelegationInvalid, "segment %d is outside delegation %s's segments %s", req.Segment, d.ID, d.SegmentsText())
	case !d.CoversTarget(req.Resource):
		return nil, fencegate.Errorf(fencegate.CodeResourceMismatch, "target %q is outside the delegation's target prefix %q", req.Resource, d.TargetPrefix)
	}
	return &d, nil
}

// checkAccess applies the access policy to the caller: an owner must still be
// allowed to lease the grant's resource; a delegate must be allowed to write
// the target as a delegate (DelegateAccess), and the owner who delegated must
// still be allowed to lease it.
func (g *Gateway) checkAccess(req Request, vg fencegate.VerifiedGrant, d *fencegate.Delegation) error {
	if g.cfg.Access == nil {
		return nil
	}
	if err := g.cfg.Access.CheckLease(vg.Owner, vg.Resource); err != nil {
		return err
	}
	if d == nil {
		return nil
	}
	if da, ok := g.cfg.Access.(DelegateAccess); ok {
		return da.CheckDelegate(req.Caller, req.Resource)
	}
	return g.cfg.Access.CheckLease(req.Caller, req.Resource)
}
