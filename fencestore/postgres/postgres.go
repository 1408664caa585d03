// Package postgres is a fencegate.FenceStore on PostgreSQL (pgx/v5, pgxpool),
// for gateways that share fence state.
//
// Admit and Settle each run as one READ COMMITTED transaction that first locks
// the resource's row with SELECT ... FOR UPDATE (Admit inserts the row with ON
// CONFLICT DO NOTHING first, so there is always a row to lock; a rejected Admit
// rolls the insert back, so a resource that never admitted anything still has
// no row). Every write to a resource's receipts happens under that lock, so the
// rules of package fencerules see the latest committed state and cannot race.
// Settle finds the resource through the receipt and takes the same lock first,
// so Admit and Settle lock in the same order. A partial unique index on
// (resource, fence, segment) over live receipts backs the rules up.
//
// Statements are sent in pgx batches: an Admit costs four round trips (BEGIN,
// lock and read, write, COMMIT). synchronous_commit is left as the server has
// it (on by default): an admitted segment is durable once Admit returns.
//
// Fences and segment numbers are NUMERIC(20,0), which holds every uint64.
//
// Open applies the embedded migrations (migrations/*.sql) with goose, holding a
// Postgres advisory lock keyed by database and schema, so replicas starting
// together migrate once and the others wait. The store's tables live in the
// first schema of the connection's search_path.
package postgres

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
	"github.com/fencegate/fencegate/internal/pgmigrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MigrationsTable is the goose version table of this store.
const MigrationsTable = "fencestore_migrations"

// Store is the Postgres FenceStore. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
}

var _ fencegate.FenceStore = (*Store)(nil)

// Open connects to url, applies pending migrations and returns the store.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "parse Postgres URL")
	}
	if err := Migrate(ctx, cfg.ConnConfig); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInternal, "connect to Postgres")
	}
	return &Store{pool: pool}, nil
}

// Migrate applies the pending migrations of the store (package pgmigrate:
// goose under an advisory lock keyed by database and schema) over one
// dedicated connection described by cc. Running it again is a no-op.
func Migrate(ctx context.Context, cc *pgx.ConnConfig) error {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "migrations")
	}
	return pgmigrate.Up(ctx, cc, sub, MigrationsTable, "fencegate/fencestore/postgres")
}

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

const (
	resourceCols = `resource, highest_fence, root, lease, last_segment_seq, grant_issued_at, pending_receipt, updated_at`
	receiptCols  = `receipt_id, resource, target, method, fence_token, segment, operation_id, operation_root,
		lease, owner, grant_digest, payload_digest, state, version, response, error, created_at, settled_at,
		request, attempts, resend, effect_key`
	liveState = `state NOT IN ('FAILED', 'NOT_APPLIED')`
)

// Admit implements fencegate.FenceStore.
func (s *Store) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	if err := fencerules.ValidateAdmit(&req); err != nil {
		return fencegate.Admission{}, err
	}
	g := &req.Grant
	var (
		adm        fencegate.Admission
		quarantine error
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Bind the target to this resource, or learn (after any concurrent binder
		// commits) which resource it is bound to; a refusal rolls the binding back.
		var (
			bound   string
			newBind bool
		)
		if err := tx.QueryRow(ctx, `INSERT INTO fence_targets (target, resource) VALUES ($1, $2)
			ON CONFLICT (target) DO UPDATE SET target = EXCLUDED.target RETURNING resource, xmax = 0`,
			req.Target, g.Resource).Scan(&bound, &newBind); err != nil {
			return err
		}
		if err := fencerules.CheckTarget(bound, &req); err != nil {
			return err
		}
		// Only an accepted admission binds a target: undo a new binding otherwise.
		unbind := func() error {
			if !newBind {
				return nil
			}
			_, err := tx.Exec(ctx, `DELETE FROM fence_targets WHERE target = $1`, req.Target)
			return err
		}
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO fence_resources (resource) VALUES ($1) ON CONFLICT (resource) DO NOTHING`, g.Resource)
		b.Queue(`SELECT `+resourceCols+` FROM fence_resources WHERE resource = $1 FOR UPDATE`, g.Resource)
		b.Queue(`SELECT `+receiptCols+` FROM fence_receipts
			WHERE resource = $1 AND fence_token = $2 AND segment = $3 AND `+liveState,
			g.Resource, g.FenceToken, req.Segment)
		b.Queue(`SELECT version FROM fence_versions WHERE target = $1`, req.Target)
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return err
		}
		row, err := scanResource(br.QueryRow())
		if err != nil {
			return err
		}
		var live *fencegate.Receipt
		if r, err := scanReceipt(br.QueryRow()); err == nil {
			live = &r
		} else if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		prev, err := scanVersion(br.QueryRow())
		if err != nil {
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}

		verdict, rerr := fencerules.Decide(row, &req, live)
		switch verdict {
		case fencerules.Reject:
			return rerr
		case fencerules.Replay:
			adm = fencegate.Admission{Receipt: *live, Replay: true, PreviousVersion: prev}
			return unbind()
		case fencerules.Quarantine:
			if err := unbind(); err != nil {
				return err
			}
			if err := putQuarantine(ctx, tx, &req, live); err != nil {
				return err
			}
			quarantine = rerr
			return nil
		}

		r := fencerules.NewReceipt(&req)
		next := fencerules.Accepted(&req)
		b = &pgx.Batch{}
		b.Queue(`INSERT INTO fence_receipts (`+receiptCols+`)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)`,
			receiptArgs(&r)...)
		b.Queue(`UPDATE fence_resources SET highest_fence = $2, root = $3, lease = $4, last_segment_seq = $5,
			grant_issued_at = $6, pending_receipt = $7, updated_at = $8 WHERE resource = $1`,
			next.Resource, next.HighestFence, next.Root, next.Lease, next.LastSegmentSeq,
			next.GrantIssuedAt, next.PendingReceipt, next.UpdatedAt)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		adm = fencegate.Admission{Receipt: r, PreviousVersion: prev}
		return nil
	})
	if err != nil {
		return fencegate.Admission{}, translate(err, "admit")
	}
	if quarantine != nil {
		return fencegate.Admission{}, quarantine
	}
	return adm, nil
}

// Settle implements fencegate.FenceStore.
func (s *Store) Settle(ctx context.Context, receiptID string, o fencegate.Outcome) (fencegate.Receipt, error) {
	var out fencegate.Receipt
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		// Lock the resource first, as Admit does, then read the receipt.
		b.Queue(`SELECT `+resourceCols+` FROM fence_resources
			WHERE resource = (SELECT resource FROM fence_receipts WHERE receipt_id = $1) FOR UPDATE`, receiptID)
		b.Queue(`SELECT `+receiptCols+` FROM fence_receipts WHERE receipt_id = $1`, receiptID)
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		row, rowErr := scanResource(br.QueryRow())
		if rowErr != nil && !errors.Is(rowErr, pgx.ErrNoRows) {
			return rowErr
		}
		r, err := scanReceipt(br.QueryRow())
		if err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fencegate.Errorf(fencegate.CodeNotFound, "receipt %q not found", receiptID)
			}
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		next, changed, err := fencerules.Settle(r, &o)
		if err != nil {
			return err
		}
		out = next
		if !changed {
			return nil
		}
		b = &pgx.Batch{}
		b.Queue(`UPDATE fence_receipts SET state = $2, version = $3, response = $4, error = $5, settled_at = $6,
			attempts = $7, resend = $8 WHERE receipt_id = $1`,
			next.ID, string(next.State), next.Version, responseArg(next.Response), next.Error, next.SettledAt,
			next.Attempts, next.Resend)
		if next.State == fencegate.ReceiptCommitted {
			if next.Version == "" {
				b.Queue(`DELETE FROM fence_versions WHERE target = $1`, next.Target)
			} else {
				b.Queue(`INSERT INTO fence_versions (target, version, updated_at) VALUES ($1, $2, $3)
					ON CONFLICT (target) DO UPDATE SET version = EXCLUDED.version, updated_at = EXCLUDED.updated_at`,
					next.Target, next.Version, *next.SettledAt)
			}
		}
		if rowErr == nil {
			if row, changed := fencerules.SettleRow(row, &next, o.Now); changed {
				b.Queue(`UPDATE fence_resources SET last_segment_seq = $2, pending_receipt = $3, updated_at = $4
					WHERE resource = $1`, row.Resource, row.LastSegmentSeq, row.PendingReceipt, row.UpdatedAt)
			}
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fencegate.Receipt{}, translate(err, "settle")
	}
	return out, nil
}

// Resource implements fencegate.FenceStore.
func (s *Store) Resource(ctx context.Context, resource string) (fencegate.ResourceState, error) {
	row, err := scanResource(s.pool.QueryRow(ctx, `SELECT `+resourceCols+` FROM fence_resources WHERE resource = $1`, resource))
	if errors.Is(err, pgx.ErrNoRows) {
		return row, fencegate.Errorf(fencegate.CodeNotFound, "resource %q has no fence state", resource)
	}
	if err != nil {
		return row, translate(err, "read resource")
	}
	return row, nil
}

// Receipt implements fencegate.FenceStore.
func (s *Store) Receipt(ctx context.Context, id string) (fencegate.Receipt, error) {
	r, err := scanReceipt(s.pool.QueryRow(ctx, `SELECT `+receiptCols+` FROM fence_receipts WHERE receipt_id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fencegate.Errorf(fencegate.CodeNotFound, "receipt %q not found", id)
	}
	if err != nil {
		return r, translate(err, "read receipt")
	}
	return r, nil
}

// ReceiptAt implements fencegate.FenceStore.
func (s *Store) ReceiptAt(ctx context.Context, resource string, fence, segment uint64) (fencegate.Receipt, error) {
	r, err := scanReceipt(s.pool.QueryRow(ctx, `SELECT `+receiptCols+` FROM fence_receipts
		WHERE resource = $1 AND fence_token = $2 AND segment = $3 AND `+liveState, resource, fence, segment))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fencegate.Errorf(fencegate.CodeNotFound, "no live receipt for %s fence %d segment %d", resource, fence, segment)
	}
	if err != nil {
		return r, translate(err, "read receipt")
	}
	return r, nil
}

// Version implements fencegate.FenceStore.
func (s *Store) Version(ctx context.Context, target string) (string, error) {
	v, err := scanVersion(s.pool.QueryRow(ctx, `SELECT version FROM fence_versions WHERE target = $1`, target))
	if err != nil {
		return "", translate(err, "read version")
	}
	return v, nil
}

// --- scanning ----------------------------------------------------------------

func scanResource(row pgx.Row) (fencegate.ResourceState, error) {
	var r fencegate.ResourceState
	err := row.Scan(&r.Resource, &r.HighestFence, &r.Root, &r.Lease, &r.LastSegmentSeq,
		&r.GrantIssuedAt, &r.PendingReceipt, &r.UpdatedAt)
	r.UpdatedAt = r.UpdatedAt.UTC()
	return r, err
}

func scanReceipt(row pgx.Row) (fencegate.Receipt, error) {
	var (
		r        fencegate.Receipt
		state    string
		response []byte
		request  []byte
	)
	err := row.Scan(&r.ID, &r.Resource, &r.Target, &r.Method, &r.FenceToken, &r.Segment, &r.OperationID,
		&r.OperationRoot, &r.Lease, &r.Owner, &r.GrantDigest, &r.PayloadDigest, &state, &r.Version,
		&response, &r.Error, &r.CreatedAt, &r.SettledAt, &request, &r.Attempts, &r.Resend, &r.EffectKey)
	if err != nil {
		return fencegate.Receipt{}, err
	}
	r.State = fencegate.ReceiptState(state)
	r.CreatedAt = r.CreatedAt.UTC()
	if r.SettledAt != nil {
		t := r.SettledAt.UTC()
		r.SettledAt = &t
	}
	if response != nil {
		r.Response = new(fencegate.EffectResponse)
		if err := json.Unmarshal(response, r.Response); err != nil {
			return fencegate.Receipt{}, fmt.Errorf("decode response of receipt %q: %w", r.ID, err)
		}
	}
	if request != nil {
		r.Request = new(fencegate.EffectRequest)
		if err := json.Unmarshal(request, r.Request); err != nil {
			return fencegate.Receipt{}, fmt.Errorf("decode request of receipt %q: %w", r.ID, err)
		}
	}
	return r, nil
}

// scanVersion returns "" for no row.
func scanVersion(row pgx.Row) (string, error) {
	var v string
	if err := row.Scan(&v); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", err
	}
	return v, nil
}

func receiptArgs(r *fencegate.Receipt) []any {
	return []any{r.ID, r.Resource, r.Target, r.Method, r.FenceToken, r.Segment, r.OperationID,
		r.OperationRoot, r.Lease, r.Owner, r.GrantDigest, r.PayloadDigest, string(r.State), r.Version,
		responseArg(r.Response), r.Error, r.CreatedAt, r.SettledAt, jsonArg(r.Request), r.Attempts, r.Resend, r.EffectKey}
}

// jsonArg is the jsonb argument for a kept request: NULL for nil.
func jsonArg(req *fencegate.EffectRequest) any {
	if req == nil {
		return nil
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil // strings, a map of string slices and a []byte always marshal
	}
	return data
}

// responseArg is the jsonb argument for resp: NULL for nil.
func responseArg(resp *fencegate.EffectResponse) any {
	if resp == nil {
		return nil
	}
	data, err := json.Marshal(resp)
	if err != nil {
		return nil // a map[string]string and a []byte always marshal
	}
	return data
}
