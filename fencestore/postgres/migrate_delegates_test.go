package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestDelegatesMigrationAppliesOnTheVersionBefore: on a database at the
// version before migration 00011 (every migration below it applied), with
// a receipt written as the code of that version wrote it, Open applies it; the old
// receipt reads as the owner's (no delegate, no delegation), its segment's
// replay by a delegate answers it as it was, and the next segment written
// by a delegate keeps its delegate and delegation.
func TestDelegatesMigrationAppliesOnTheVersionBefore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.PostgresURL(t)
	conn := migrateBefore(ctx, t, url, "00011_receipt_delegates.sql")
	// What version 10 wrote for an admitted, committed segment 1.
	_, err := conn.Exec(ctx, oldCommittedSegment)
	_ = conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}

	s, err := Open(ctx, url) // applies 00011
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r1, err := s.Receipt(ctx, "r1")
	if err != nil || r1.Owner != "coord" || r1.Delegate != "" || r1.DelegationID != "" || r1.State != fencegate.ReceiptCommitted {
		t.Fatalf("receipt from before the migration = %+v, %v", r1, err)
	}
	g := oldGrant
	now := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	replay, err := s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: 1, Target: "res/a", Method: "PUT", PayloadDigest: "sha256:a",
		ReceiptID: "r1-again", Delegate: "consumer", DelegationID: "dlg_1", Now: now})
	if err != nil || !replay.Replay || replay.Receipt.ID != "r1" || replay.Receipt.Delegate != "" {
		t.Fatalf("a delegate's replay of the old segment = %+v, %v; want the old receipt as it was", replay, err)
	}
	adm, err := s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: 2, Target: "res/a", Method: "PUT", PayloadDigest: "sha256:b",
		ReceiptID: "r2", Delegate: "consumer", DelegationID: "dlg_1", Now: now})
	if err != nil || adm.Replay || adm.Receipt.Delegate != "consumer" || adm.Receipt.DelegationID != "dlg_1" {
		t.Fatalf("delegated segment 2 after the migration = %+v, %v", adm, err)
	}
	p, err := s.ReceiptsByResource(ctx, "res/a", fencegate.Page{})
	if err != nil || len(p.Receipts) != 2 || p.Receipts[0].Delegate != "" || p.Receipts[1].Delegate != "consumer" || p.Receipts[1].DelegationID != "dlg_1" {
		t.Fatalf("ReceiptsByResource after the migration = %+v, %v", p.Receipts, err)
	}
}

// oldCommittedSegment is what the store's versions before the delegates
// wrote for an admitted, committed segment 1 of res/a (fence 3, owner
// coord, receipt r1), which oldGrant holds.
const oldCommittedSegment = `
		INSERT INTO fence_resources (resource, highest_fence, root, lease, last_segment_seq, grant_issued_at, pending_receipt, updated_at)
			VALUES ('res/a', 3, 'root', 'lease', 1, 1700000000000, '', '2026-01-01T00:00:01Z');
		INSERT INTO fence_targets (target, resource) VALUES ('res/a', 'res/a');
		INSERT INTO fence_receipts (receipt_id, resource, target, method, fence_token, segment, operation_id, operation_root,
			lease, owner, grant_digest, payload_digest, state, version, created_at, settled_at, effect_key, land_by)
			VALUES ('r1', 'res/a', 'res/a', 'PUT', 3, 1, 'op', 'root', 'lease', 'coord', 'sha256:g', 'sha256:a', 'COMMITTED', 'v1',
				'2026-01-01T00:00:01Z', '2026-01-01T00:00:02Z', '', '2026-01-01T00:00:31Z');`

// oldGrant is the grant oldCommittedSegment's segment was written under.
var oldGrant = fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: "res/a", Owner: "coord", Lease: "lease", FenceToken: 3,
	OperationID: "op", OperationRoot: "root", IssuedAt: 1_700_000_000_000}, Digest: "sha256:g"}
