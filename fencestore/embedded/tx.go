package embedded

import (
	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

// The two writes that Admit and Settle run inside a batched transaction; an
// admission with a prior settle runs both in one op.

// admitTx decides req inside tx and writes what the verdict says. refused
// is the segment's ruling (with a quarantine record written for
// QUARANTINED); fault is any other error, after which tx must be rolled back.
func admitTx(tx *bolt.Tx, req *fencegate.AdmitRequest) (adm fencegate.Admission, refused, fault error) {
	g := &req.Grant
	bound := string(tx.Bucket(bTargets).Get([]byte(req.Target)))
	if err := fencerules.CheckTarget(bound, req); err != nil {
		return adm, err, nil
	}
	row, _, err := getResource(tx, g.Resource)
	if err != nil {
		return adm, nil, err
	}
	var live *fencegate.Receipt
	if g.FenceToken == row.HighestFence {
		if id := treeOf(tx, bByRes).Get(liveKey(g.Resource, g.FenceToken, req.Segment)); id != nil {
			r, err := getReceipt(tx, string(id))
			if err != nil {
				return adm, nil, err
			}
			live = &r
		}
	}
	verdict, rerr := fencerules.Decide(row, req, live)
	switch verdict {
	case fencerules.Reject:
		return adm, rerr, nil
	case fencerules.Replay:
		return fencegate.Admission{Receipt: *live, Replay: true, PreviousVersion: getVersion(tx, req.Target)}, nil, nil
	case fencerules.Quarantine:
		if err := putQuarantine(tx, req, live); err != nil {
			return adm, nil, err
		}
		return adm, rerr, nil
	}
	// Accept.
	if treeOf(tx, bReceipts).Get([]byte(req.ReceiptID)) != nil {
		return adm, fencegate.Errorf(fencegate.CodeInvalidRequest, "receipt ID %q is already in use", req.ReceiptID), nil
	}
	r := fencerules.NewReceipt(req)
	if err := putReceipt(tx, &r, ""); err != nil {
		return adm, nil, err
	}
	if err := treeOf(tx, bByRes).Put(liveKey(r.Resource, r.FenceToken, r.Segment), []byte(r.ID)); err != nil {
		return adm, nil, err
	}
	if err := putIndexes(tx, &r); err != nil {
		return adm, nil, err
	}
	next := fencerules.Accepted(req)
	if err := putResource(tx, &next); err != nil {
		return adm, nil, err
	}
	if bound != g.Resource { // an unchanged binding is not rewritten (a page less per commit)
		if err := tx.Bucket(bTargets).Put([]byte(req.Target), []byte(g.Resource)); err != nil {
			return adm, nil, err
		}
	}
	return fencegate.Admission{Receipt: r, PreviousVersion: getVersion(tx, req.Target)}, nil, nil
}

// settleTx applies one settle inside tx (fencerules.SettleEffects). Its
// rulings (NOT_FOUND, RECEIPT_SETTLED, ...) come back as refuse(err), before
// anything is written; any other error is a fault.
func settleTx(tx *bolt.Tx, id string, o *fencegate.Outcome) (fencegate.Receipt, error) {
	r, err := getReceipt(tx, id)
	if fencegate.ErrorCode(err) == fencegate.CodeNotFound {
		return fencegate.Receipt{}, refuse(err)
	}
	if err != nil {
		return fencegate.Receipt{}, err
	}
	row, found, err := getResource(tx, r.Resource)
	if err != nil {
		return fencegate.Receipt{}, err
	}
	rowp := &row
	if !found {
		rowp = nil
	}
	st, err := fencerules.SettleEffects(r, rowp, o)
	if err != nil {
		return fencegate.Receipt{}, refuse(err)
	}
	next := st.Receipt
	if !st.Changed {
		return next, nil
	}
	if err := putReceipt(tx, &next, r.State); err != nil {
		return fencegate.Receipt{}, err
	}
	if st.SetVersion {
		vb := treeOf(tx, bVersions)
		if next.Version == "" {
			err = vb.Delete([]byte(next.Target))
		} else {
			err = vb.Put([]byte(next.Target), []byte(next.Version))
		}
		if err != nil {
			return fencegate.Receipt{}, err
		}
	}
	if st.DropLive {
		if err := treeOf(tx, bByRes).Delete(liveKey(next.Resource, next.FenceToken, next.Segment)); err != nil {
			return fencegate.Receipt{}, err
		}
	}
	if st.RowChanged {
		if err := putResource(tx, &st.Row); err != nil {
			return fencegate.Receipt{}, err
		}
	}
	return next, nil
}
