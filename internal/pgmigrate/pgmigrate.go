// Package pgmigrate is the project's one migration mechanism for PostgreSQL:
// goose (github.com/pressly/goose/v3) over embedded SQL files, under a
// session advisory lock keyed by the database, the current schema and the
// caller's name, so replicas starting together migrate once and the others
// wait. Every Postgres adapter (fencestore/postgres, registry/postgres) calls
// Up; none has a migrator of its own.
package pgmigrate

import (
	"context"
	"database/sql"
	"hash/fnv"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/fencegate/fencegate"
)

// Up applies the pending migrations in fsys (goose SQL files at its root,
// "NNNNN_name.sql" with "-- +goose Up" annotations) over one dedicated
// connection described by cc, recording them in the goose version table
// named table in the connection's current schema. name keys the advisory lock
// (together with database and schema), so two adapters in one schema never
// wait for each other. Closing the connection at the end releases the lock
// even if unlocking failed. Running it again is a no-op.
func Up(ctx context.Context, cc *pgx.ConnConfig, fsys fs.FS, table, name string) error {
	db := stdlib.OpenDB(*cc.Copy())
	defer db.Close()
	db.SetMaxOpenConns(2)

	var where sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT current_database() || '/' || current_schema()").Scan(&where); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "connect to Postgres")
	}
	if !where.Valid {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "the search_path names no existing schema")
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(name + ":" + where.String))
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(int64(h.Sum64())),
		lock.WithLockTimeout(1, 300), // poll every second, for up to 5 minutes
	)
	if err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "migration lock")
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker),
		goose.WithTableName(table),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "migrations")
	}
	if _, err := p.Up(ctx); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "apply migrations")
	}
	return nil
}
