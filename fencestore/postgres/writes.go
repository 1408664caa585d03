package postgres

import (
	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
)

// The statements both paths (locked and fast) queue. Each SQL text is fixed,
// so pgx prepares it once per connection and a batch is one round trip.

const (
	insertReceipt = `INSERT INTO fence_receipts (` + receiptCols + `)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26)`
	updateRow = `UPDATE fence_resources SET highest_fence = $2, root = $3, lease = $4, last_segment_seq = $5,
		grant_issued_at = $6, pending_receipt = $7, updated_at = $8 WHERE resource = $1`
	updateReceipt = `UPDATE fence_receipts SET state = $2, version = $3, response = $4, error = $5, settled_at = $6,
		attempts = $7, resend = $8, retry_at = $9 WHERE receipt_id = $1`
	deleteVersion = `DELETE FROM fence_versions WHERE target = $1`
	// versionConflict makes a version insert an upsert.
	versionConflict = ` ON CONFLICT (target) DO UPDATE SET version = EXCLUDED.version, updated_at = EXCLUDED.updated_at`
)

// The version upsert is an UPDATE of the target's row, and an insert only
// when the UPDATE found none: an UPDATE writes one WAL record, where INSERT
// ... ON CONFLICT DO UPDATE first locks the row it conflicts with (a second
// record). The insert is still an upsert, for a row that SwapVersion (which
// runs outside the resource's lock) inserted meanwhile. $1 is the target,
// $2 the version, $3 the time; the fast path's statement (cas.go) spells
// the same two parts with its own placeholders (versionParts).
var upsertVersion = func() string {
	update, insert := versionParts("$1", "$2", "$3", "vu")
	return "WITH " + update + " " + insert
}()

// versionParts are the two CTEs of the version upsert (the second one the
// statement's end), the first one named name.
func versionParts(target, version, at, name string) (update, insert string) {
	update = name + ` AS (UPDATE fence_versions SET version = ` + version + `::text, updated_at = ` + at +
		`::timestamptz WHERE target = ` + target + `::text RETURNING 1)`
	insert = `INSERT INTO fence_versions (target, version, updated_at) SELECT ` + target + `::text, ` + version +
		`::text, ` + at + `::timestamptz WHERE NOT EXISTS (SELECT 1 FROM ` + name + `)` + versionConflict
	return update, insert
}

func queueReceipt(b *pgx.Batch, r *fencegate.Receipt) {
	b.Queue(insertReceipt, receiptArgs(r)...)
}

// queueRow writes every column of row.
func queueRow(b *pgx.Batch, row *fencegate.ResourceState) {
	b.Queue(updateRow, row.Resource, row.HighestFence, row.Root, row.Lease, row.LastSegmentSeq,
		row.GrantIssuedAt, row.PendingReceipt, row.UpdatedAt)
}

// queueSettled writes a settled receipt's changing columns and, for
// COMMITTED, its target's version.
func queueSettled(b *pgx.Batch, next *fencegate.Receipt) {
	b.Queue(updateReceipt, next.ID, string(next.State), next.Version, responseArg(next.Response), next.Error,
		next.SettledAt, next.Attempts, next.Resend, next.RetryAt)
	queueVersion(b, next)
}

func queueVersion(b *pgx.Batch, next *fencegate.Receipt) {
	if next.State != fencegate.ReceiptCommitted {
		return
	}
	if next.Version == "" {
		b.Queue(deleteVersion, next.Target)
		return
	}
	b.Queue(upsertVersion, next.Target, next.Version, *next.SettledAt)
}

// settleState applies settles, one after another, to what a locked batch
// read: receipts by ID, resource rows by resource and (for an admission
// batch) the targets' versions. It queues the receipts' and versions'
// writes; the caller writes the rows it marks dirty.
type settleState struct {
	receipts map[string]fencegate.Receipt
	rows     map[string]fencegate.ResourceState
	versions map[string]string // nil: not tracked
	dirty    []string          // resources whose row changed, first change first
	isDirty  map[string]bool
}

func (st *settleState) mark(res string) {
	if st.isDirty == nil {
		st.isDirty = map[string]bool{}
	}
	if !st.isDirty[res] {
		st.isDirty[res] = true
		st.dirty = append(st.dirty, res)
	}
}

// apply does what Settle(id, o) does, on st: the receipt as settled, or the
// ruling that refuses it (then nothing is written).
func (st *settleState) apply(b *pgx.Batch, id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	r, ok := st.receipts[id]
	if !ok {
		return fencegate.Receipt{}, fencegate.Errorf(fencegate.CodeNotFound, "receipt %q not found", id)
	}
	var row *fencegate.ResourceState
	if rw, ok := st.rows[r.Resource]; ok {
		row = &rw
	}
	eff, err := fencerules.SettleEffects(r, row, &o)
	if err != nil {
		return fencegate.Receipt{}, err
	}
	next := eff.Receipt
	if !eff.Changed {
		return next, nil
	}
	st.receipts[id] = next
	queueSettled(b, &next)
	if st.versions != nil && eff.SetVersion {
		if next.Version == "" {
			delete(st.versions, next.Target)
		} else {
			st.versions[next.Target] = next.Version
		}
	}
	if eff.RowChanged {
		st.rows[next.Resource] = eff.Row
		st.mark(next.Resource)
	}
	return next, nil
}

// queueDirty writes every row st marked dirty.
func (st *settleState) queueDirty(b *pgx.Batch) {
	for _, res := range st.dirty {
		row := st.rows[res]
		queueRow(b, &row)
	}
}
