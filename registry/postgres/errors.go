package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/pgfault"
)

// translate turns pgx, network and context errors into *fencegate.Error:
// serialisation failures, deadlocks, lock timeouts (pgfault.Transient) and
// unique violations are
// BACKEND_CONFLICT (safe to retry with the same request ID), lost
// connections, a server shutting down or starting up (pgfault.Unavailable)
// and cancelled contexts BACKEND_UNAVAILABLE, a range check
// (exhausted uint64 sequence) INTERNAL, malformed text INVALID_REQUEST.
func translate(err error, op string) error {
	if err == nil {
		return nil
	}
	var (
		fe  *fencegate.Error
		pe  *pgconn.PgError
		msg = op + ": registry database"
	)
	switch {
	case errors.As(err, &fe):
		return err
	case errors.As(err, &pe):
		switch {
		case pgfault.TransientState(pe.Code), pe.Code == "23505":
			return fencegate.Wrap(err, fencegate.CodeBackendConflict, msg+" conflict")
		case pe.Code == "23514":
			return fencegate.Wrap(err, fencegate.CodeInternal, msg+" sequence exhausted")
		case pe.Code == "22021", pe.Code == "22P05", pe.Code == "54000":
			return fencegate.Wrap(err, fencegate.CodeInvalidRequest, msg+" refused the value")
		case pgfault.UnavailableState(pe.Code):
			return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, msg+" unavailable")
		}
		return fencegate.Wrap(err, fencegate.CodeInternal, msg+" error")
	case pgfault.Unavailable(err), errors.Is(err, context.Canceled):
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, msg+" unavailable")
	}
	return fencegate.Wrap(err, fencegate.CodeInternal, msg+" error")
}

// requestIDConstraint is the UNIQUE (owner, request_id) of registry_leases.
const requestIDConstraint = "registry_leases_owner_request_id_key"

// requestIDTaken reports whether err is the unique violation of
// requestIDConstraint: a concurrent acquisition with the same owner and
// request ID committed first.
func requestIDTaken(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == requestIDConstraint
}
