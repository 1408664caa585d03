// Package pgconf holds the session settings every Postgres adapter of
// fencegate (the fence store, the registry's backend) runs under, whatever
// the server's, database's or role's defaults: READ COMMITTED transactions,
// which their row locking is written for, and commits that are durable
// before they are answered (synchronous_commit and fsync not off).
package pgconf

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
)

// Apply sets cfg's sessions to READ COMMITTED as each connection opens: a
// stricter default would fail concurrent transactions that queue on one row
// (a resource's, the registry's meta row) with serialization errors
// instead. It is a SET after connecting, not a startup parameter, which
// connection poolers such as PgBouncer refuse unless told to ignore it.
func Apply(cfg *pgxpool.Config) {
	prev := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if prev != nil {
			if err := prev(ctx, conn); err != nil {
				return err
			}
		}
		_, err := conn.Exec(ctx, "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED")
		return err
	}
}

// CheckDurable refuses (UNSUPPORTED, naming what) a server whose commits
// are not durable when answered: synchronous_commit off, set anywhere
// (server, database, role, URL), or fsync off (the server's): a commit it
// answered could be lost in a crash, so an admission could vanish after its
// effect was forwarded, or a fence be issued twice. Every other
// synchronous_commit value waits at least for the local WAL flush.
func CheckDurable(ctx context.Context, pool *pgxpool.Pool, what string) error {
	var syncCommit, fsync string
	if err := pool.QueryRow(ctx, "SELECT current_setting('synchronous_commit'), current_setting('fsync')").Scan(&syncCommit, &fsync); err != nil {
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, what+": read synchronous_commit and fsync")
	}
	if syncCommit == "off" {
		return fencegate.Errorf(fencegate.CodeUnsupported,
			"%s: synchronous_commit is off for this connection; a commit must be durable before it is answered (set it to on, or any value but off, for the gateway's role or database)", what)
	}
	if fsync == "off" {
		return fencegate.Errorf(fencegate.CodeUnsupported,
			"%s: the server runs with fsync off; a commit must be durable before it is answered (set fsync = on)", what)
	}
	return nil
}
