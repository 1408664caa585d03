package postgres

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
)

var _ fencegate.Compactor = (*Store)(nil)

// compactKey is a position in the by-state index (state, created_at,
// receipt_id) of one state: the receipt last examined there. The zero key
// is the beginning.
type compactKey struct {
	at time.Time
	id string
}

// compactFrom is where CompactReceipts resumes the walk of each state.
type compactFrom struct {
	mu   sync.Mutex // held for a whole call: one walk at a time
	from map[string]compactKey
}

// compactSQL deletes up to $2 receipts of state $3 created and settled
// before $1 that the rules allow, after position ($4, $5) of the by-state
// index, in index order, and answers how many it deleted and the last of
// them ($4, $5 of the statement that goes on). The NOT EXISTS keep a
// resource's last accepted segment, the segment before it at the same
// fence while a receipt of the resource is pending (a FAILED or NOT_APPLIED
// settle gives the last segment back: fencerules.Compactable) and receipts
// a quarantine record names.
const compactSQL = `WITH doomed AS (
	SELECT r.receipt_id FROM fence_receipts r
	WHERE r.state = $3 AND r.created_at < $1 AND r.settled_at < $1
	  AND (r.created_at, r.receipt_id) > ($4::timestamptz, $5::text)
	  AND NOT EXISTS (SELECT 1 FROM fence_resources f WHERE f.resource = r.resource
	                  AND f.highest_fence = r.fence_token
	                  AND (f.last_segment_seq = r.segment
	                       OR (f.pending_receipt <> '' AND f.last_segment_seq = r.segment + 1)))
	  AND NOT EXISTS (SELECT 1 FROM fence_quarantine q WHERE q.receipt_id = r.receipt_id)
	ORDER BY r.created_at, r.receipt_id LIMIT $2
	FOR UPDATE OF r SKIP LOCKED),
gone AS (
	DELETE FROM fence_receipts d USING doomed WHERE d.receipt_id = doomed.receipt_id
	RETURNING d.created_at, d.receipt_id)
SELECT count(*) OVER (), created_at, receipt_id FROM gone ORDER BY created_at DESC, receipt_id DESC LIMIT 1`

// CompactReceipts implements fencegate.Compactor with one statement per
// settled state (compactSQL). Each walks the by-state index (state,
// created_at, receipt_id) up to `before` (a receipt settled before it was
// created before it), locks what it deletes with SKIP LOCKED so that it
// never waits for, or holds up, an admission or settle, and leaves a
// resource's last accepted segment (and, while a receipt of the resource is
// pending, the segment before it at the same fence, which a give-back makes
// last again) and quarantined receipts alone.
//
// A walk that stops at limit resumes, in the next call, after the last
// receipt it deleted, so that a sweep of calls (the retention worker's,
// while each deletes limit) examines each receipt the rules keep once, not
// once per call: kept receipts are the oldest, and every call walked them
// again. A walk that reaches `before` starts the next call from the
// beginning, where kept receipts may since have become compactable; the
// answer means what it always meant (fewer than limit: nothing more to
// delete now). The positions are this process's, not shared with other
// gateways: one that another gateway's deletions passed only walks further.
func (s *Store) CompactReceipts(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	c := &s.compact
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.from == nil {
		c.from = map[string]compactKey{}
	}
	n := 0
	for _, state := range terminalStates {
		if n == limit {
			break
		}
		from := c.from[state]
		var (
			deleted int64
			last    compactKey
		)
		err := s.pool.QueryRow(ctx, compactSQL, before.UTC(), limit-n, state, from.at, from.id).
			Scan(&deleted, &last.at, &last.id)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		if err != nil {
			return n, translate(err, "compact receipts")
		}
		n += int(deleted)
		if n == limit {
			c.from[state] = last // stopped at limit: the next call goes on after it
		} else {
			delete(c.from, state) // walked to `before`: the next call starts again
		}
	}
	return n, nil
}

// terminalStates are the states CompactReceipts deletes, in the order it
// takes them.
var terminalStates = []string{string(fencegate.ReceiptFailed), string(fencegate.ReceiptNotApplied), string(fencegate.ReceiptCommitted)}

// compactQuarantineSQL deletes up to $2 quarantine records whose last
// attempt is before $1, oldest first, through fence_quarantine_by_last_at
// (migration 00010), and answers how many it deleted. FOR UPDATE SKIP
// LOCKED: a record an admission is counting another attempt on is skipped
// (it is being hit again), and one the admission updated after this
// statement's snapshot is locked in its new version and tested again
// (last_at moved: kept). An admission that conflicts with a record being
// deleted waits for the delete and inserts a new record.
const compactQuarantineSQL = `WITH doomed AS (
	SELECT id FROM fence_quarantine WHERE last_at < $1
	ORDER BY last_at, quarantine_id LIMIT $2
	FOR UPDATE SKIP LOCKED),
gone AS (
	DELETE FROM fence_quarantine q USING doomed WHERE q.id = doomed.id RETURNING 1)
SELECT count(*) FROM gone`

// quarantineStatement bounds the records one statement of
// CompactQuarantine deletes (as quarantineExamine bounds a transaction of
// the embedded store's): a record it has locked and not yet deleted holds
// up an admission counting another attempt on it, and with it that
// admission's whole write batch, until the statement commits; a record may
// keep up to 1 MiB of payload.
const quarantineStatement = 1024

// CompactQuarantine implements fencegate.Compactor with statements of at
// most quarantineStatement records (compactQuarantineSQL), each its own
// transaction, until limit are deleted or one deletes fewer than it asked.
// The records it deletes are the oldest by last attempt, so it needs no
// resume position: the index is walked from its beginning to `before`, and
// every record examined is deleted but those an admission holds (SKIP
// LOCKED: being hit again, they are kept). The receipts the deleted
// records named are left to CompactReceipts, whose NOT EXISTS no longer
// finds a record naming them. It returns the records deleted, also with an
// error (by the statements committed before it).
func (s *Store) CompactQuarantine(ctx context.Context, before time.Time, limit int) (int, error) {
	total := 0
	for total < limit {
		want := min(limit-total, quarantineStatement)
		var n int64
		if err := s.pool.QueryRow(ctx, compactQuarantineSQL, before.UTC(), want).Scan(&n); err != nil {
			return total, translate(err, "compact quarantine")
		}
		total += int(n)
		if int(n) < want {
			break
		}
	}
	return total, nil
}
