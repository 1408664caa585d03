package pgfault

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnavailableSeparatesOutagesFromRequestErrors: outages (server shutting
// down or starting up, refused connections, a session lost mid-exchange) are
// Unavailable; request errors (syntax, constraint, no rows) and a cancelled
// caller are not.
func TestUnavailableSeparatesOutagesFromRequestErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Port 1 on loopback: nothing listens there, the dial is refused.
	_, refused := pgx.Connect(ctx, "postgres://u@127.0.0.1:1/db?sslmode=disable&connect_timeout=5")
	if refused == nil {
		t.Fatal("a connection to 127.0.0.1:1 succeeded")
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"admin shutdown 57P01", &pgconn.PgError{Code: "57P01"}, true},
		{"starting up 57P03", &pgconn.PgError{Code: "57P03"}, true},
		{"connection failure 08006", &pgconn.PgError{Code: "08006"}, true},
		{"too many connections 53300", &pgconn.PgError{Code: "53300"}, true},
		{"read-only transaction 25006", &pgconn.PgError{Code: "25006"}, true},
		{"invalid transaction state 25000", &pgconn.PgError{Code: "25000"}, false},
		{"connection refused", refused, true},
		{"lost mid-exchange", fmt.Errorf("receive: %w", io.ErrUnexpectedEOF), true},
		{"conn closed", fmt.Errorf("query: %w", pgconn.ErrConnClosed), true},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), true},
		{"syntax error 42601", &pgconn.PgError{Code: "42601"}, false},
		{"unique violation 23505", &pgconn.PgError{Code: "23505"}, false},
		{"no rows", pgx.ErrNoRows, false},
		{"cancelled caller", fmt.Errorf("query: %w", context.Canceled), false},
		{"nil", nil, false},
	} {
		if got := Unavailable(tc.err); got != tc.want {
			t.Errorf("Unavailable(%s: %v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	for code, want := range map[string]bool{"40001": true, "40P01": true, "55P03": true, "23505": false, "55000": false, "42601": false} {
		if got := Transient(&pgconn.PgError{Code: code}); got != want {
			t.Errorf("Transient(%s) = %v, want %v", code, got, want)
		}
	}
}
