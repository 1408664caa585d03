// Package postgres is the lease backend on PostgreSQL (pgx/v5 pool). Every
// operation is one transaction (Prune first reads, in one statement outside
// it, whether any record is due); an acquire locks the resource's sequence row,
// so fences of a resource are handed out one at a time, and every mutation
// but Prune moves a global revision row in the same transaction. Lock order
// is always resource row, lease row, meta row, so operations cannot deadlock
// each other. The global revision row serialises mutations across
// resources: that is the price of one strictly increasing revision. Lease
// rows no longer held are deleted once their expiry + retention has passed
// (leaserule.Forgotten; WithRetention): a bounded batch at the end of each
// acquisition, and by each Prune, which locks only the rows it deletes
// (skipping any another transaction holds) and opens its transaction only
// once a read has found a record due. Resource rows (fence sequences)
// and the meta row are never deleted. Two concurrent
// acquisitions of one (owner, request ID) on different resources are not
// ordered by a resource lock: the one whose insert meets the other's row
// answers as a repeat of it.
package postgres

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/pgconf"
	"github.com/fencegate/fencegate/internal/pgmigrate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// Backend implements fencegate.LeaseBackend on PostgreSQL. Fences use the full
// uint64 range (stored as NUMERIC(20,0)).
type Backend struct {
	pool      *pgxpool.Pool
	retention time.Duration
}

var _ fencegate.LeaseBackend = (*Backend)(nil)

// MigrationsTable is the goose version table of the registry's schema.
const MigrationsTable = "registry_migrations"

//go:embed migrations/*.sql
var migrations embed.FS

// Open connects to url and applies the embedded migrations with goose
// (package pgmigrate, version table MigrationsTable, under an advisory lock
// keyed by database and schema) before returning; Close closes the pool.
func Open(ctx context.Context, url string, opts ...Option) (*Backend, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "parse registry Postgres URL")
	}
	// READ COMMITTED: SELECT ... FOR UPDATE reads the latest committed row,
	// and every mutation moves the one registry_meta row.
	pgconf.Apply(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, translate(err, "connect registry database")
	}
	// A server refused is left as it was: checked before anything migrates.
	if err := pgconf.CheckDurable(ctx, pool, "registry Postgres backend"); err != nil {
		pool.Close()
		return nil, err
	}
	if err := Migrate(ctx, cfg.ConnConfig); err != nil {
		pool.Close()
		return nil, err
	}
	b := &Backend{pool: pool, retention: leaserule.DefaultRetention}
	for _, o := range opts {
		o(b)
	}
	return b, nil
}

// Migrate applies the registry's pending migrations over one dedicated
// connection described by cc. Running it again is a no-op; a database whose
// tables predate goose is taken over as it is (the DDL is idempotent).
func Migrate(ctx context.Context, cc *pgx.ConnConfig) error {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "registry migrations")
	}
	return pgmigrate.Up(ctx, cc, sub, MigrationsTable, "fencegate/registry/postgres")
}

// Close closes the connection pool.
func (b *Backend) Close() error {
	b.pool.Close()
	return nil
}

const leaseColumns = `id, resource, owner, request_id, fence::text, revision::text, operation_id,
	operation_root, operation_category, state, ttl_ns, acquired_at, expires_at`

// stored is a lease row; State is the state written by the last mutation.
type stored struct{ fencegate.Lease }

func scanLease(row pgx.Row) (*stored, error) {
	var (
		s                      stored
		fence, revision, state string
		ttl                    int64
	)
	err := row.Scan(&s.ID, &s.Resource, &s.Owner, &s.RequestID, &fence, &revision, &s.OperationID,
		&s.OperationRoot, &s.OperationCategory, &state, &ttl, &s.AcquiredAt, &s.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fencegate.Errorf(fencegate.CodeNotFound, "lease not found")
	}
	if err != nil {
		return nil, err
	}
	if s.FenceToken, err = parseUint(fence); err != nil {
		return nil, err
	}
	if s.Revision, err = parseUint(revision); err != nil {
		return nil, err
	}
	s.State, s.TTL = fencegate.StatusState(state), time.Duration(ttl)
	s.AcquiredAt, s.ExpiresAt = s.AcquiredAt.UTC(), s.ExpiresAt.UTC()
	return &s, nil
}

// at is the lease with its state read at now.
func (s *stored) at(now time.Time) fencegate.Lease {
	l := s.Lease
	l.State = leaserule.StateAt(s.State, s.ExpiresAt, now)
	return l
}

// Acquire implements fencegate.LeaseBackend in one transaction.
func (b *Backend) Acquire(ctx context.Context, req fencegate.AcquireRequest) (fencegate.Lease, error) {
	if err := leaserule.CheckAcquire(req); err != nil {
		return fencegate.Lease{}, err
	}
	var out fencegate.Lease
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		// The guard first, before a repeat or a held resource is answered
		// (as by every backend); checked again under the meta lock below
		// for the fence this acquire issues.
		if err := checkGuard(ctx, tx, req.Guard); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO registry_resources (resource) VALUES ($1) ON CONFLICT DO NOTHING`, req.Resource); err != nil {
			return err
		}
		var lastText string
		var current *string
		if err := tx.QueryRow(ctx, `SELECT last_fence::text, current_lease FROM registry_resources WHERE resource = $1 FOR UPDATE`,
			req.Resource).Scan(&lastText, &current); err != nil {
			return err
		}
		// Checked under the resource lock, so a concurrent duplicate has committed.
		prev, err := scanLease(tx.QueryRow(ctx, `SELECT `+leaseColumns+` FROM registry_leases WHERE owner = $1 AND request_id = $2`,
			req.Owner, req.RequestID))
		switch {
		case err == nil && b.forgotten(prev, req.Now):
			// Past retention: the request ID is a new acquisition.
			if _, err := tx.Exec(ctx, `DELETE FROM registry_leases WHERE id = $1`, prev.ID); err != nil {
				return err
			}
		case err == nil:
			if err := leaserule.SameRequest(prev.at(req.Now), req); err != nil {
				return err
			}
			out = prev.at(req.Now)
			return nil
		case fencegate.ErrorCode(err) != fencegate.CodeNotFound:
			return err
		}
		if current != nil {
			cur, err := scanLease(tx.QueryRow(ctx, `SELECT `+leaseColumns+` FROM registry_leases WHERE id = $1 FOR UPDATE`, *current))
			switch {
			case fencegate.ErrorCode(err) == fencegate.CodeNotFound:
				// Pruned past retention: it holds nothing.
			case err != nil:
				return err
			case cur.at(req.Now).State == fencegate.StateHeld:
				return fencegate.Errorf(fencegate.CodeLeaseHeld, "resource is held by another lease")
			case cur.State == fencegate.StateHeld: // superseded: expired for good
				if _, err := tx.Exec(ctx, `UPDATE registry_leases SET state = 'EXPIRED' WHERE id = $1`, cur.ID); err != nil {
					return err
				}
			}
		}
		last, err := parseUint(lastText)
		if err != nil {
			return err
		}
		rev, floor, inc, err := bumpRevision(ctx, tx)
		if err != nil {
			return err
		}
		// The meta row is locked now: the marker and revision read with the
		// bump are those this fence is issued under (the acquire guard).
		if err := leaserule.CheckIncarnation(req.Guard, inc, rev-1); err != nil {
			return err
		}
		fence, err := leaserule.NextFence(last, floor, math.MaxUint64)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE registry_meta SET max_fence = greatest(max_fence, $1::numeric)`, formatUint(fence)); err != nil {
			return err
		}
		l, err := scanLease(tx.QueryRow(ctx, `INSERT INTO registry_leases (id, resource, owner, request_id, fence, revision,
			operation_id, operation_root, operation_category, state, ttl_ns, acquired_at, expires_at)
			VALUES ($1, $2, $3, $4, $5::numeric, $6::numeric, $7, $8, $9, 'HELD', $10, $11, $12)
			RETURNING `+leaseColumns,
			req.LeaseID, req.Resource, req.Owner, req.RequestID, formatUint(fence), formatUint(rev),
			req.OperationID, req.OperationRoot, req.OperationCategory, int64(req.TTL), req.Now, req.Now.Add(req.TTL)))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE registry_resources SET last_fence = $2::numeric, current_lease = $3 WHERE resource = $1`,
			req.Resource, formatUint(fence), l.ID); err != nil {
			return err
		}
		out = l.at(req.Now)
		_, err = b.prune(ctx, tx, req.Now)
		return err
	})
	if requestIDTaken(err) {
		return b.repeat(ctx, req)
	}
	return out, translate(err, "acquire")
}

// Renew implements fencegate.LeaseBackend. The lease keeps its TTL and
// Revision of acquisition; only ExpiresAt moves, to now+ttl.
func (b *Backend) Renew(ctx context.Context, id, owner string, ttl time.Duration, now time.Time, g fencegate.Guard) (fencegate.Lease, error) {
	if err := leaserule.CheckTTL(ttl); err != nil {
		return fencegate.Lease{}, err
	}
	var out fencegate.Lease
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if err := checkGuard(ctx, tx, g); err != nil {
			return err
		}
		cur, err := scanLease(tx.QueryRow(ctx, `SELECT `+leaseColumns+` FROM registry_leases WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		if err := leaserule.Mismatch(cur.Lease, owner); err != nil {
			return err
		}
		if cur.at(now).State != fencegate.StateHeld {
			return fencegate.Errorf(fencegate.CodeLeaseNotHeld, "lease %s is not held", id)
		}
		if _, _, _, err := bumpRevision(ctx, tx); err != nil {
			return err
		}
		l, err := scanLease(tx.QueryRow(ctx, `UPDATE registry_leases SET expires_at = $2 WHERE id = $1 RETURNING `+leaseColumns,
			id, now.Add(ttl)))
		if err != nil {
			return err
		}
		out = l.at(now)
		return nil
	})
	return out, translate(err, "renew")
}

// Release implements fencegate.LeaseBackend. A lease that is no longer held
// is returned as it is, released false.
func (b *Backend) Release(ctx context.Context, id, owner string, now time.Time, g fencegate.Guard) (fencegate.Lease, bool, error) {
	var out fencegate.Lease
	released := false
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if err := checkGuard(ctx, tx, g); err != nil {
			return err
		}
		var resource string
		err := tx.QueryRow(ctx, `SELECT resource FROM registry_leases WHERE id = $1`, id).Scan(&resource)
		if errors.Is(err, pgx.ErrNoRows) {
			return fencegate.Errorf(fencegate.CodeNotFound, "lease not found")
		} else if err != nil {
			return err
		}
		// Resource row before lease row: the order Acquire uses.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM registry_resources WHERE resource = $1 FOR UPDATE`, resource); err != nil {
			return err
		}
		cur, err := scanLease(tx.QueryRow(ctx, `SELECT `+leaseColumns+` FROM registry_leases WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return err
		}
		if err := leaserule.Mismatch(cur.Lease, owner); err != nil {
			return err
		}
		if cur.at(now).State != fencegate.StateHeld {
			out = cur.at(now)
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE registry_resources SET current_lease = NULL WHERE resource = $1 AND current_lease = $2`,
			resource, id); err != nil {
			return err
		}
		if _, _, _, err := bumpRevision(ctx, tx); err != nil {
			return err
		}
		l, err := scanLease(tx.QueryRow(ctx, `UPDATE registry_leases SET state = 'RELEASED' WHERE id = $1 RETURNING `+leaseColumns, id))
		if err != nil {
			return err
		}
		out, released = l.at(now), true
		return nil
	})
	return out, released && err == nil, translate(err, "release")
}

// Lease implements fencegate.LeaseBackend.
func (b *Backend) Lease(ctx context.Context, id string, now time.Time) (fencegate.Lease, error) {
	s, err := scanLease(b.pool.QueryRow(ctx, `SELECT `+leaseColumns+` FROM registry_leases WHERE id = $1`, id))
	if err != nil {
		return fencegate.Lease{}, translate(err, "read lease")
	}
	return s.at(now), nil
}

// SetFloor implements fencegate.LeaseBackend. The floor only ever rises; a
// lower floor changes nothing and moves no revision.
func (b *Backend) SetFloor(ctx context.Context, floor uint64, g fencegate.Guard) error {
	if err := leaserule.CheckFloor(floor, math.MaxUint64); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if err := checkGuard(ctx, tx, g); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE registry_meta SET floor = $1::numeric, revision = revision + 1 WHERE floor < $1::numeric`,
			formatUint(floor))
		return err
	})
	return translate(err, "set floor")
}

// bumpRevision locks the meta row, moves the global revision and returns the
// new revision, the current floor and the incarnation marker.
func bumpRevision(ctx context.Context, tx pgx.Tx) (rev, floor uint64, incarnation string, err error) {
	var revText, floorText string
	if err = tx.QueryRow(ctx, `UPDATE registry_meta SET revision = revision + 1 RETURNING revision::text, floor::text, incarnation`).
		Scan(&revText, &floorText, &incarnation); err != nil {
		return 0, 0, "", err
	}
	if rev, err = parseUint(revText); err != nil {
		return 0, 0, "", err
	}
	floor, err = parseUint(floorText)
	return rev, floor, incarnation, err
}

func parseUint(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fencegate.Wrap(err, fencegate.CodeInternal, "stored number outside uint64")
	}
	return v, nil
}

func formatUint(v uint64) string { return strconv.FormatUint(v, 10) }
