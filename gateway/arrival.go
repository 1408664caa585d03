package gateway

import (
	"context"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore"
)

// arrivalLookBack is how many of the lease's latest segments arrivalSegment
// searches for an earlier write of the same target.
const arrivalLookBack = 16

// arrivalSegment numbers a request that carries no segment (AssignSegment),
// under the resource's lock, so that concurrent requests of one lease get
// distinct, consecutive segments in the order they reach admission:
//
//   - a grant that is not the resource's current fence and root gets 1 (its
//     first write; a superseded grant is refused STALE_OWNER by admission);
//   - otherwise the lease's latest segments (at most arrivalLookBack) are
//     searched, newest first, for the request's target: if the newest one
//     for that target has the same method and payload digest, the request is
//     a retry of it and gets its segment, so admission answers the original
//     receipt and nothing is forwarded; any other earlier write of the target
//     (other bytes, a delete) means a new write;
//   - else lastSegmentSeq + 1.
//
// The numbering is per process: with several gateway replicas a lease's
// unnumbered writes must reach one replica (or carry their own segment),
// else two replicas may give one segment to two different payloads and the
// second is QUARANTINED. It reads fence state and receipts only.
func (g *Gateway) arrivalSegment(ctx context.Context, vg fencegate.VerifiedGrant, req Request) (uint64, error) {
	rs, err := g.cfg.Store.Resource(ctx, vg.Resource)
	switch {
	case fencegate.ErrorCode(err) == fencegate.CodeNotFound:
		return 1, nil
	case err != nil:
		return 0, err
	case rs.HighestFence != vg.FenceToken || rs.Root != vg.OperationRoot || rs.LastSegmentSeq == 0:
		return 1, nil
	}
	for seg := rs.LastSegmentSeq; seg >= 1 && rs.LastSegmentSeq-seg < arrivalLookBack; seg-- {
		r, err := g.cfg.Store.ReceiptAt(ctx, vg.Resource, vg.FenceToken, seg)
		if fencegate.ErrorCode(err) == fencegate.CodeNotFound {
			continue
		}
		if err != nil {
			return 0, err
		}
		if r.Target != req.Target {
			continue
		}
		if r.Method == req.Method && r.PayloadDigest == req.PayloadDigest && r.OperationRoot == vg.OperationRoot {
			return seg, nil
		}
		break
	}
	return rs.LastSegmentSeq + 1, nil
}

// Admissible is Precheck plus the fence check a write would meet first,
// for steps that stage a later write without being one (an S3 multipart
// upload's create and parts): a grant below the resource's highest fence
// is STALE_OWNER (FENCE_REGRESSION if it was issued after the grant that
// set it). It writes nothing but, like Precheck, the journal of refusals.
func (g *Gateway) Admissible(ctx context.Context, req Request) error {
	err := g.admissible(ctx, req)
	if err != nil && g.cfg.Modes.For(req.Resource) != Shadow {
		g.note(req, Result{}, err)
	}
	return err
}

func (g *Gateway) admissible(ctx context.Context, req Request) error {
	vg, _, _, err := g.authorize(ctx, req, false)
	if err != nil {
		return err
	}
	rs, err := g.cfg.Store.Resource(ctx, vg.Resource)
	switch {
	case fencegate.ErrorCode(err) == fencegate.CodeNotFound:
		return nil
	case err != nil:
		return err
	}
	return fencestore.FenceOrder(rs, vg)
}
