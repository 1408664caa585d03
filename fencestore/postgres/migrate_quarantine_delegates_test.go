package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestQuarantineDelegatesMigrationAppliesOnTheVersionBefore: on a database
// at the version before migration 00012 (every migration below it applied),
// with a quarantine record written as the code of that version wrote it,
// Open applies it; the old record reads as the owner's (no delegate, no
// delegation), a delegate's repeat of its refused request counts another
// attempt on it and leaves it so, and a delegate's new refused request is
// recorded naming its delegate and delegation.
func TestQuarantineDelegatesMigrationAppliesOnTheVersionBefore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.PostgresURL(t)
	conn := migrateBefore(ctx, t, url, "00012_quarantine_delegates.sql")
	// What version 11 wrote for an admitted, committed segment 1 and a
	// refused rewrite of it.
	old := fencegate.QuarantineID("res/a", 3, 1, "res/a", "PUT", "", "sha256:x")
	_, err := conn.Exec(ctx, oldCommittedSegment+`
		INSERT INTO fence_quarantine (quarantine_id, resource, fence_token, segment, target, method, effect_key, receipt_id,
			payload_digest, payload_size, payload, owner, at, last_at, attempts)
			VALUES ('`+old+`', 'res/a', 3, 1, 'res/a', 'PUT', '', 'r1', 'sha256:x', 1, 'x', 'coord',
				'2026-01-01T00:00:03Z', '2026-01-01T00:00:03Z', 1);`)
	_ = conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}

	s, err := Open(ctx, url) // applies 00012
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, err := s.QuarantineRecord(ctx, old)
	if err != nil || q.Owner != "coord" || q.Delegate != "" || q.DelegationID != "" || q.Attempts != 1 || string(q.Payload) != "x" {
		t.Fatalf("quarantine record from before the migration = %+v, %v", q, err)
	}
	g := oldGrant
	now := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	refuse := func(digest string) {
		t.Helper()
		_, err := s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: 1, Target: "res/a", Method: "PUT", PayloadDigest: digest,
			ReceiptID: "r-" + digest, Delegate: "consumer", DelegationID: "dlg_1", Now: now})
		if fencegate.ErrorCode(err) != fencegate.CodeQuarantined {
			t.Fatalf("a delegate's rewrite of segment 1 (%s): %v, want QUARANTINED", digest, err)
		}
	}
	refuse("sha256:x")
	if q, err = s.QuarantineRecord(ctx, old); err != nil || q.Attempts != 2 || q.Delegate != "" || q.DelegationID != "" {
		t.Fatalf("the old record after a delegate's repeat = %+v, %v; want a second attempt, still the owner's", q, err)
	}
	refuse("sha256:y")
	p, err := s.Quarantined(ctx, "res/a", fencegate.Page{})
	if err != nil || len(p.Records) != 2 || p.Records[0].ID != old || p.Records[1].Delegate != "consumer" || p.Records[1].DelegationID != "dlg_1" {
		t.Fatalf("Quarantined after the migration = %+v, %v", p.Records, err)
	}
}
