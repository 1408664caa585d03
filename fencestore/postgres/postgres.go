// Package postgres is a fencegate.FenceStore on PostgreSQL (pgx/v5, pgxpool),
// for gateways that share fence state.
//
// Concurrent Admits and Settles are gathered into batches together, one READ
// COMMITTED transaction each (group commit, up to slots batches at once, no
// key in two; see group.go), so a settle shares its COMMIT with admissions
// and other settles. On the locked path a batch first locks the rows of its
// resources (the admissions' and the settled receipts') with SELECT ... FOR
// UPDATE, in resource order, and reads receipts, bindings and versions only
// after the lock, so the rules of package fencerules see the latest committed
// state and cannot race. A resource or target seen for the first time gets
// its row with INSERT ... ON CONFLICT DO NOTHING (a member that is then
// refused deletes it again, so a resource that never admitted anything has
// no row; the insert leaves a row that exists as it is). A settle finds its
// resource through the receipt and is locked with the admissions, so every
// batch locks in one order. A partial unique index on (resource, fence,
// segment) over live receipts backs the rules up. A batch whose transaction
// the server refuses is run again member by member, so one member's failure
// is only its own, whatever its kind.
//
// Statements are pipelined in pgx batches. A batch whose every member is
// accepted (or settled) on the state this process last committed is one
// round trip, BEGIN ... COMMIT, each changed row compared with its exact
// previous value in the statement that changes it (fast.go); otherwise, and
// whenever that comparison fails, the batch runs on the locked path: BEGIN
// with the reads, then the writes with COMMIT, two round trips (three when a
// resource or target is new). An admission may carry a prior settle
// (AdmitRequest.Prior, PriorSettling), applied first in the same
// transaction. synchronous_commit is left as the server has it, and Open
// refuses a server where it is off: an admitted segment is durable once Admit
// returns. Transactions run READ COMMITTED whatever the server's default. The pool is
// sized for the batches that may run at once (group.go) unless the URL sets
// pool_max_conns (at least 3: that many minus two batches at once, two
// connections for reads).
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
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/pgconf"
	"github.com/fencegate/fencegate/internal/pgmigrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// MigrationsTable is the goose version table of this store.
const MigrationsTable = "fencestore_migrations"

// Store is the Postgres FenceStore. It is safe for concurrent use.
type Store struct {
	pool   *pgxpool.Pool
	writes group[*writeCall] // admissions and settles, batched together
	known  known             // what this process last committed (fast.go)
	// compact is where CompactReceipts resumes its walk of each state.
	compact compactFrom
	// fast counts batches committed on the fast path; missed, those it
	// rolled back and ran again under the locks.
	fast, missed atomic.Int64
	// lockedOnly turns the fast path off (tests run the locked path alone).
	lockedOnly bool
}

var _ fencegate.FenceStore = (*Store)(nil)

// Open connects to url, applies pending migrations and returns the store,
// tuned by opts.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	s, err := open(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// open is Open with a hook that may adjust the pool's configuration (tests
// trace the round trips).
func open(ctx context.Context, url string, adjust func(*pgxpool.Config)) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInvalidRequest, "parse Postgres URL")
	}
	if adjust != nil {
		adjust(cfg)
	}
	pgconf.Apply(cfg) // READ COMMITTED: the batches lock rows and read them as last committed
	// Up to slots write batches run at once, each on a connection of its
	// own; two more serve reads. A pool_max_conns in the URL sets the
	// budget instead: at least 3, so that reads keep their two.
	slots := defaultSlots
	if strings.Contains(cfg.ConnString(), "pool_max_conns") {
		if cfg.MaxConns < 3 {
			return nil, fencegate.Errorf(fencegate.CodeInvalidRequest,
				"Postgres URL: pool_max_conns is %d, at least 3 are needed (one write batch and two connections for reads)", cfg.MaxConns)
		}
		slots = int(cfg.MaxConns - 2)
	} else {
		cfg.MaxConns = int32(slots + 2)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fencegate.Wrap(err, fencegate.CodeInternal, "connect to Postgres")
	}
	// A server refused is left as it was: checked before anything migrates.
	if err := pgconf.CheckDurable(ctx, pool, "Postgres fence store"); err != nil {
		pool.Close()
		return nil, err
	}
	if err := Migrate(ctx, cfg.ConnConfig); err != nil {
		pool.Close()
		return nil, err
	}
	s := &Store{pool: pool}
	s.writes.slots = slots
	s.writes.run = s.runWrites
	return s, nil
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

var _ fencegate.GroupCommitter = (*Store)(nil)

// GroupCommits implements fencegate.GroupCommitter for the admissions and
// settles (the writes this store groups, group.go; version swaps, unbinds
// and compaction run alone and are not counted): the batches that committed
// and the calls they carried. A batch run again on the locked path after a
// fast-path miss counts once; one run member by member after a failure,
// once per member that committed; a failed or uncertain batch not at all.
func (s *Store) GroupCommits() (batches, writes uint64) {
	return s.writes.batches.Load(), s.writes.members.Load()
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
		request, attempts, resend, effect_key, retry_at, land_by, delegate, delegation_id`
	liveState = `state NOT IN ('FAILED', 'NOT_APPLIED')`
)

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
		landBy   *time.Time
	)
	err := row.Scan(&r.ID, &r.Resource, &r.Target, &r.Method, &r.FenceToken, &r.Segment, &r.OperationID,
		&r.OperationRoot, &r.Lease, &r.Owner, &r.GrantDigest, &r.PayloadDigest, &state, &r.Version,
		&response, &r.Error, &r.CreatedAt, &r.SettledAt, &request, &r.Attempts, &r.Resend, &r.EffectKey, &r.RetryAt, &landBy,
		&r.Delegate, &r.DelegationID)
	if err != nil {
		return fencegate.Receipt{}, err
	}
	if landBy != nil {
		r.LandBy = landBy.UTC()
	}
	r.State = fencegate.ReceiptState(state)
	r.CreatedAt = r.CreatedAt.UTC()
	if r.SettledAt != nil {
		t := r.SettledAt.UTC()
		r.SettledAt = &t
	}
	if r.RetryAt != nil {
		t := r.RetryAt.UTC()
		r.RetryAt = &t
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

// receiptArgs are r's columns in receiptCols' order.
func receiptArgs(r *fencegate.Receipt) []any {
	return appendReceiptArgs(make([]any, 0, receiptArgCount), r)
}

// receiptArgCount is the number of receiptCols.
const receiptArgCount = 26

// appendReceiptArgs appends r's receiptArgCount columns to dst.
func appendReceiptArgs(dst []any, r *fencegate.Receipt) []any {
	return append(dst, r.ID, r.Resource, r.Target, r.Method, num(r.FenceToken), num(r.Segment), r.OperationID,
		r.OperationRoot, r.Lease, r.Owner, r.GrantDigest, r.PayloadDigest, string(r.State), r.Version,
		responseArg(r.Response), r.Error, r.CreatedAt, r.SettledAt, jsonArg(r.Request), r.Attempts, r.Resend, r.EffectKey, r.RetryAt,
		landByArg(r.LandBy), r.Delegate, r.DelegationID)
}

// landByArg is the land_by argument: NULL for none (a zero time).
func landByArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
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
