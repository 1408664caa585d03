// Package pgfault classifies errors of the pgx driver for the Postgres
// adapters (fencestore/postgres, registry/postgres), so both answer a server
// that is down, restarting or overloaded the same way: BACKEND_UNAVAILABLE,
// never INTERNAL. It is the one place that knows which driver errors mean
// "the database could not do it now" rather than "the request is wrong".
package pgfault

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Unavailable reports whether err means the server could not be reached,
// dropped the session, or refused work for the moment: a retry later may
// succeed and nothing about the request is wrong. It covers
//
//   - server errors of SQLSTATE class 08 (connection exception), 53
//     (insufficient resources), 57 (operator intervention: admin_shutdown,
//     crash_shutdown, cannot_connect_now while starting up or recovering) and
//     58 (system error), as the PostgreSQL manual's Appendix A lists them,
//     and 25006 (read_only_sql_transaction: a standby or read-only server);
//   - failures to connect (*pgconn.ConnectError) and network errors;
//   - a connection lost mid-exchange (io.EOF, io.ErrUnexpectedEOF, reset,
//     broken pipe, pgconn.ErrConnClosed) and a transaction left closed by it;
//   - driver timeouts and expired deadlines, and errors pgconn marks
//     SafeToRetry (nothing was sent).
//
// A cancelled context is not a store fault (the caller went away); it is left
// to the caller.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return UnavailableState(pe.Code)
	}
	var (
		ce *pgconn.ConnectError
		ne net.Error
	)
	switch {
	case errors.As(err, &ce), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, pgx.ErrTxClosed), errors.Is(err, pgx.ErrTxCommitRollback),
		errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err), pgconn.SafeToRetry(err):
		return true
	}
	return false
}

// Transient reports whether err is a server verdict that the same
// transaction may succeed when run again: serialization_failure (40001),
// deadlock_detected (40P01) and lock_not_available (55P03: a lock waited for
// past the session's lock_timeout, or refused to NOWAIT).
func Transient(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && TransientState(pe.Code)
}

// UnavailableState reports whether a server error's SQLSTATE is of a class
// Unavailable counts as the database being unable to do it now: 08, 53, 57
// or 58, or read_only_sql_transaction (25006: a hot standby, or a primary
// set read-only, as during a failover), which a write may pass once the
// pool reaches a writable primary.
func UnavailableState(sqlstate string) bool {
	if sqlstate == "25006" {
		return true
	}
	if len(sqlstate) < 2 {
		return false
	}
	switch sqlstate[:2] {
	case "08", "53", "57", "58":
		return true
	}
	return false
}

// TransientState reports whether a server error's SQLSTATE is one Transient
// counts as worth running the transaction again: 40001, 40P01 or 55P03.
func TransientState(sqlstate string) bool {
	return sqlstate == "40001" || sqlstate == "40P01" || sqlstate == "55P03"
}
