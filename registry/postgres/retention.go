package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// Option configures Open.
type Option func(*Backend)

// WithRetention sets how long a lease record that is no longer held, and its
// request ID, are kept after the lease's expiry (leaserule.Forgotten; at
// least leaserule.MinRetention, 0 keeps them for ever). The default is
// leaserule.DefaultRetention.
func WithRetention(d time.Duration) Option {
	return func(b *Backend) { b.retention = leaserule.Retention(d) }
}

// forgotten applies the retention rule to a stored lease at now.
func (b *Backend) forgotten(s *stored, now time.Time) bool {
	return leaserule.Forgotten(s.State, s.ExpiresAt, now, b.retention)
}

// Prune implements fencegate.LeaseBackend. One statement outside any
// transaction block (pruneDue) answers the guard and whether any record is
// past retention, so a call with nothing to delete (most of a registry's
// ticks) costs that one read: no transaction block, no lock, no write. Only
// when a record is due do the guard (checkGuard, read again) and prune run,
// in one transaction that locks no meta row and moves no revision. A claim
// committing between the guard's read and the delete is harmless: what is
// deleted was forgotten under any marker.
func (b *Backend) Prune(ctx context.Context, now time.Time, g fencegate.Guard) (int, error) {
	due, err := b.pruneDue(ctx, now, g)
	if err != nil || !due {
		return 0, translate(err, "prune")
	}
	var n int
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		if err := checkGuard(ctx, tx, g); err != nil {
			return err
		}
		n, err = b.prune(ctx, tx, now)
		return err
	})
	if err != nil {
		return 0, translate(err, "prune")
	}
	return n, nil
}

// pruneDue reads, in one statement (one snapshot, no transaction block), the
// meta row for g (not read for an empty guard) (answerGuard: COORDINATION_STATE_LOST when it fails) and
// whether any lease record has expired by the retention cutoff at now
// (never, when retention keeps them for ever). A record found due may be
// gone by the time prune looks (another prune or acquisition took it): the
// transaction then deletes nothing.
func (b *Backend) pruneDue(ctx context.Context, now time.Time, g fencegate.Guard) (bool, error) {
	cutoff, ok := leaserule.ForgottenBefore(now, b.retention)
	const dueSQL = `$1::boolean AND EXISTS (SELECT 1 FROM registry_leases WHERE expires_at <= $2)`
	var (
		cur, revText string
		due          bool
	)
	if g.Incarnation == "" { // no guard: the meta row is not read, as checkGuard does not
		err := b.pool.QueryRow(ctx, `SELECT `+dueSQL, ok, cutoff).Scan(&due)
		return due, err
	}
	err := b.pool.QueryRow(ctx, `SELECT incarnation, revision::text, `+dueSQL+` FROM registry_meta`,
		ok, cutoff).Scan(&cur, &revText, &due)
	if err != nil {
		return false, err
	}
	if err := answerGuard(g, cur, revText); err != nil {
		return false, err
	}
	return due, nil
}

// prune deletes up to leaserule.PruneBatch lease records past retention at
// now, earliest expiry first, and returns how many. It skips rows another
// transaction holds, so it never waits (it runs last in an acquisition,
// after the meta row is locked, and alone in Prune). A resource's
// current_lease may then name a deleted record: that reads as no live
// lease. Resource rows and the meta row are never deleted.
func (b *Backend) prune(ctx context.Context, tx pgx.Tx, now time.Time) (int, error) {
	cutoff, ok := leaserule.ForgottenBefore(now, b.retention)
	if !ok {
		return 0, nil
	}
	tag, err := tx.Exec(ctx, `DELETE FROM registry_leases WHERE id IN (SELECT id FROM registry_leases
		WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, cutoff, leaserule.PruneBatch)
	return int(tag.RowsAffected()), err
}

// repeat answers an acquisition whose insert found its (owner, request ID)
// taken by a concurrent acquisition (of another resource, so the resource
// lock did not order them): the lease that one made, as a repeat
// (leaserule.SameRequest: REQUEST_ID_CONFLICT when it differs).
func (b *Backend) repeat(ctx context.Context, req fencegate.AcquireRequest) (fencegate.Lease, error) {
	var out fencegate.Lease
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if err := checkGuard(ctx, tx, req.Guard); err != nil {
			return err
		}
		prev, err := scanLease(tx.QueryRow(ctx, `SELECT `+leaseColumns+` FROM registry_leases WHERE owner = $1 AND request_id = $2`,
			req.Owner, req.RequestID))
		if fencegate.ErrorCode(err) == fencegate.CodeNotFound {
			return fencegate.Errorf(fencegate.CodeBackendConflict, "request ID taken and released concurrently, retry")
		} else if err != nil {
			return err
		}
		out = prev.at(req.Now)
		return leaserule.SameRequest(out, req)
	})
	return out, translate(err, "acquire")
}
