package postgres

import (
	"context"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// checkGuard is the guard of an acquire, renew, release, floor or prune,
// run first in its transaction, before any row is locked (the meta row is
// locked last, by bumpRevision, in every mutation's lock order). A claim
// committing between this read and the bump is harmless: a renew or release
// issues no fence, and a lease from before a claim reads REVOKED whatever
// they do; a floor only raises fences; a prune deletes only forgotten
// records.
func checkGuard(ctx context.Context, tx pgx.Tx, g fencegate.Guard) error {
	if g.Incarnation == "" {
		return nil
	}
	var cur, revText string
	if err := tx.QueryRow(ctx, `SELECT incarnation, revision::text FROM registry_meta`).Scan(&cur, &revText); err != nil {
		return err
	}
	return answerGuard(g, cur, revText)
}

// answerGuard is g's answer (leaserule.CheckIncarnation) to the marker cur
// and the revision revText read from the meta row.
func answerGuard(g fencegate.Guard, cur, revText string) error {
	rev, err := parseUint(revText)
	if err != nil {
		return err
	}
	return leaserule.CheckIncarnation(g, cur, rev)
}

const incarnationQuery = `SELECT incarnation, incarnation_since::text, revision::text,
	greatest(floor, max_fence)::text FROM registry_meta`

// Incarnation implements fencegate.LeaseBackend with one statement.
func (b *Backend) Incarnation(ctx context.Context) (fencegate.Incarnation, error) {
	inc, err := scanIncarnation(b.pool.QueryRow(ctx, incarnationQuery))
	return inc, translate(err, "read incarnation")
}

func scanIncarnation(row pgx.Row) (fencegate.Incarnation, error) {
	var (
		inc                 fencegate.Incarnation
		since, rev, highest string
	)
	if err := row.Scan(&inc.ID, &since, &rev, &highest); err != nil {
		return inc, err
	}
	var err error
	for _, f := range []struct {
		dst *uint64
		s   string
	}{{&inc.Since, since}, {&inc.Revision, rev}, {&inc.HighestFence, highest}} {
		if *f.dst, err = parseUint(f.s); err != nil {
			return inc, err
		}
	}
	return inc, nil
}

// Claim implements fencegate.LeaseBackend in one transaction on the meta row.
func (b *Backend) Claim(ctx context.Context, prev, id string, floor uint64) (fencegate.Incarnation, error) {
	if err := leaserule.CheckClaim(id, floor, math.MaxUint64); err != nil {
		return fencegate.Incarnation{}, err
	}
	var out fencegate.Incarnation
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var cur string
		if err := tx.QueryRow(ctx, `SELECT incarnation FROM registry_meta FOR UPDATE`).Scan(&cur); err != nil {
			return err
		}
		if cur != prev {
			return leaserule.ClaimLost(prev, cur)
		}
		if _, err := tx.Exec(ctx, `UPDATE registry_meta SET revision = revision + 1, floor = greatest(floor, $1::numeric),
			incarnation = $2, incarnation_since = revision + 1`, formatUint(floor), id); err != nil {
			return err
		}
		var err error
		out, err = scanIncarnation(tx.QueryRow(ctx, incarnationQuery))
		return err
	})
	return out, translate(err, "claim")
}
