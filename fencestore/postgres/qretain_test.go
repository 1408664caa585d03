package postgres

import (
	"context"
	"strings"
	"testing"
)

// TestQuarantineCompactionWalksTheLastAttemptIndex: the quarantine
// compaction's statement reaches the records through
// fence_quarantine_by_last_at (migration 00010), so that it reads the
// records older than its cutoff and not the whole table (sequential scans
// are turned off so that an empty table's plan shows what the statement
// can use).
func TestQuarantineCompactionWalksTheLastAttemptIndex(t *testing.T) {
	ctx := context.Background()
	conn := migratedConn(ctx, t)
	if _, err := conn.Exec(ctx, `SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	q := strings.NewReplacer("$1", "'2026-01-01T00:00:00Z'::timestamptz", "$2", "1000").Replace(compactQuarantineSQL)
	text := explain(ctx, t, conn, q)
	if !strings.Contains(text, "fence_quarantine_by_last_at") {
		t.Fatalf("the quarantine compaction does not use the last-attempt index:\n%s", text)
	}
}
