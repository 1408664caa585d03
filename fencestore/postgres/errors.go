package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/pgfault"
)

// translate turns driver errors into *fencegate.Error; domain errors pass
// through unchanged. A server that is down, restarting, overloaded or dropped
// the session (pgfault.Unavailable), a serialization failure, deadlock or
// lock timeout (pgfault.Transient) and a cancelled call are
// BACKEND_UNAVAILABLE: the request may be retried and, for Admit, the
// gateway checks whether the receipt was written before answering. Values the schema refuses are
// INVALID_REQUEST; anything else (a bug: a missing table, a decoding fault)
// is INTERNAL.
func translate(err error, op string) error {
	var fe *fencegate.Error
	if errors.As(err, &fe) {
		return fe
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fencegate.Wrap(err, fencegate.CodeNotFound, "fence store: "+op+": not found")
	}
	if pgfault.Unavailable(err) || pgfault.Transient(err) || errors.Is(err, context.Canceled) {
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "fence store: "+op+": the database is unavailable")
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505" && pe.ConstraintName == "fence_receipts_pkey":
			return fencegate.Wrap(err, fencegate.CodeInvalidRequest, "receipt ID is already in use")
		case pe.Code == "22021", // character_not_in_repertoire (e.g. a NUL byte in text)
			pe.Code == "22001", // string_data_right_truncation
			pe.Code == "22003", // numeric_value_out_of_range
			pe.Code == "22008", // datetime_field_overflow (a forged cursor's time)
			pe.Code == "22P02", // invalid_text_representation
			pe.Code == "22P05", // untranslatable_character (a NUL in jsonb)
			pe.Code == "23514": // check_violation
			return fencegate.Wrap(err, fencegate.CodeInvalidRequest, "fence store: "+op+": value refused")
		}
	}
	return fencegate.Wrap(err, fencegate.CodeInternal, "fence store: "+op)
}
