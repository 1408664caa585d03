package postgres_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestAForgedCursorOutsidePostgresTimeRangeIsInvalidRequest: cursors are
// opaque but not sealed, so a client can hand in one whose position lies
// outside the timestamps Postgres stores (before 4713 BC). It is a bad input
// (INVALID_REQUEST, 400), never INTERNAL, and the list still answers.
func TestAForgedCursorOutsidePostgresTimeRangeIsInvalidRequest(t *testing.T) {
	s := open(t, testenv.PostgresURL(t))
	ctx := context.Background()
	at := time.UnixMicro(math.MinInt64 / 2) // year -144,169
	for name, list := range map[string]func(cursor string) error{
		"operation": func(c string) error {
			_, err := s.ReceiptsByOperation(ctx, "op", fencegate.Page{Cursor: c})
			return err
		},
		"resource": func(c string) error {
			_, err := s.ReceiptsByResource(ctx, "res/a", fencegate.Page{Cursor: c})
			return err
		},
		"state": func(c string) error {
			_, err := s.ReceiptsByState(ctx, fencegate.ReceiptUnknown, fencegate.Page{Cursor: c})
			return err
		},
	} {
		tag := map[string]string{"operation": "receipts/operation/op", "resource": "receipts/resource/res/a",
			"state": "receipts/state/" + string(fencegate.ReceiptUnknown)}[name]
		forged := fencegate.Position{At: at, ID: "rcpt_x"}.Cursor(tag)
		if err := list(forged); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			t.Errorf("%s: forged cursor = %v, want INVALID_REQUEST", name, err)
		}
		if err := list(""); err != nil {
			t.Errorf("%s: the list no longer answers: %v", name, err)
		}
	}
	forged := fencegate.Position{Group: "res/a", At: at, ID: "q_x"}.Cursor("quarantine/")
	if _, err := s.Quarantined(ctx, "", fencegate.Page{Cursor: forged}); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
		t.Errorf("quarantine: forged cursor = %v, want INVALID_REQUEST", err)
	}
}
