package postgres

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestOnlyARefusedStatementProvesTheBatchRolledBack: after a pipeline that
// ends in COMMIT, only a statement the server refused (severity ERROR) proves
// nothing committed, so that the members may be run again one by one. A
// session-ending error (FATAL 57P01 when the backend is told to stop, which
// the server may send after COMMIT's CommandComplete), an error of the
// unavailable classes, a lost connection or a cancelled call leave the
// outcome open: every member must get the error, none may be run again (a
// rerun finds its own admission and answers it as a replay that forwards
// nothing).
func TestOnlyARefusedStatementProvesTheBatchRolledBack(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		rolledBack bool
	}{
		{"unique violation", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "23505"}, true},
		{"deadlock", &pgconn.PgError{Severity: "ERROR", Code: "40P01"}, true},
		{"bad text", fmt.Errorf("batch: %w", &pgconn.PgError{Severity: "ERROR", Code: "22021"}), true},
		{"localized ERROR", &pgconn.PgError{Severity: "FEHLER", SeverityUnlocalized: "ERROR", Code: "23514"}, true},
		{"admin shutdown after COMMIT", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}, false},
		{"localized FATAL", &pgconn.PgError{Severity: "SCHWERWIEGEND", SeverityUnlocalized: "FATAL", Code: "57P01"}, false},
		{"panic", &pgconn.PgError{Severity: "PANIC", Code: "XX000"}, false},
		{"query cancelled", &pgconn.PgError{Severity: "ERROR", Code: "57014"}, false},
		{"connection failure", &pgconn.PgError{Severity: "ERROR", Code: "08006"}, false},
		{"connection lost", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), false},
		{"cancelled", context.Canceled, false},
	} {
		if got := refusedStatement(tc.err); got != tc.rolledBack {
			t.Errorf("%s: rolled back certainly = %v, want %v", tc.name, got, tc.rolledBack)
		}
	}
}
