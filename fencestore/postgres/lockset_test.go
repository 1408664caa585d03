package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestSettleOfAReceiptAdmittedWhileItsBatchWaitsLocksItsRow: a locked batch
// chooses the rows it locks once, then waits (here for res/q, which
// another transaction holds). A receipt it settles that did not exist then
// (x-1; the gateway settles such a one NOT_APPLIED after an admission whose
// answer it lost) is admitted meanwhile by another replica. The settle must
// still take res/x's row with it: the receipt NOT_APPLIED, the row no
// longer naming it pending and its segment given back, so the resource
// takes new admissions. Before readLocked the settle ran without the row,
// and every later admission on res/x was RESOURCE_BUSY for good.
func TestSettleOfAReceiptAdmittedWhileItsBatchWaitsLocksItsRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, a, b, tx, now := waitingOnQ(ctx, t)
	notApplied := fencegate.Outcome{State: fencegate.ReceiptNotApplied, Error: "nothing forwarded", Now: now}
	ms := []*member[*writeCall]{settleW("q-1", committed("v-q", now)), settleW("x-1", notApplied)}
	done := make(chan struct{})
	go func() { defer close(done); a.runWrites(ctx, ms) }()
	waitUntilBlocked(ctx, t, a, tx, done, "ORDER BY resource COLLATE \"C\" FOR UPDATE", "the batch did not wait for res/q")
	if _, err := b.Admit(ctx, writeReq("res/x", 1, "x-1", now)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	for i, m := range ms {
		if m.err != nil {
			t.Fatalf("member %d: %v", i, m.err)
		}
	}
	r, err := b.Receipt(ctx, "x-1")
	if err != nil {
		t.Fatal(err)
	}
	row, err := b.Resource(ctx, "res/x")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != fencegate.ReceiptNotApplied || row.PendingReceipt != "" || row.LastSegmentSeq != 0 {
		t.Fatalf("receipt x-1 %s, res/x pending %q at segment %d: want NOT_APPLIED, nothing pending, segment 0",
			r.State, row.PendingReceipt, row.LastSegmentSeq)
	}
	next := writeReq("res/x", 1, "x-2", now)
	next.Grant.FenceToken = 10
	if _, err := b.Admit(ctx, next); err != nil {
		t.Fatalf("a new admission on res/x: %v", err)
	}
}

// TestALiveReceiptGivenBackBeforeTheSecondReadDoesNotLinger: the rule that a
// segment given back (its receipt settled NOT_APPLIED) takes a new admission
// holds for a resource a locked batch reads twice. The batch's first lock
// statement waits (for res/q, which another transaction holds) while
// another replica creates res/n and admits its segment 1 (n-1), so the
// first read, after the wait, sees n-1 live on a resource it did not lock.
// Before the second read (which inserts and locks res/n) n-1 is settled
// NOT_APPLIED. The admission of res/n's segment 1 must be decided on what
// the second read finds, no live receipt, and be accepted; before the
// second read replaced the first's entries it was decided on n-1 as the
// first read had seen it and quarantined as a conflicting write.
func TestALiveReceiptGivenBackBeforeTheSecondReadDoesNotLinger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, a, b, holdQ, now := waitingOnQ(ctx, t)
	a.lockedOnly = true // the fast path would decide the known settle without reading
	admitN := admitW(writeReq("res/n", 1, "a-1", now))
	ms := []*member[*writeCall]{settleW("q-1", committed("v-q", now)), admitN}
	done := make(chan struct{})
	go func() { defer close(done); a.runWrites(ctx, ms) }()
	waitUntilBlocked(ctx, t, a, holdQ, done, "ORDER BY resource COLLATE \"C\" FOR UPDATE", "the batch did not wait for res/q")
	if _, err := b.Admit(ctx, writeReq("res/n", 1, "n-1", now)); err != nil {
		t.Fatal(err)
	}
	holdN := otherTx(ctx, t, dsn)
	var holder int
	if err := holdN.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	if _, err := holdN.Exec(ctx, `SELECT 1 FROM fence_resources WHERE resource = 'res/n' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	if err := holdQ.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The batch's first read ends (seeing n-1 live) and its second waits
	// for res/n.
	for blocked := false; !blocked; {
		if err := b.pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
			t.Fatal("the batch did not wait for res/n")
		case <-time.After(5 * time.Millisecond):
		}
	}
	// n-1 given back, as a settle NOT_APPLIED leaves it.
	if _, err := holdN.Exec(ctx, `UPDATE fence_receipts SET state = 'NOT_APPLIED', error = 'nothing forwarded',
		settled_at = $1 WHERE receipt_id = 'n-1'`, now); err != nil {
		t.Fatal(err)
	}
	if _, err := holdN.Exec(ctx, `UPDATE fence_resources SET pending_receipt = '', last_segment_seq = 0
		WHERE resource = 'res/n'`); err != nil {
		t.Fatal(err)
	}
	if err := holdN.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if ms[0].err != nil {
		t.Fatalf("settle of q-1: %v", ms[0].err)
	}
	if admitN.err != nil {
		t.Fatalf("res/n segment 1 after n-1 was given back: %v (code %s)", admitN.err, fencegate.ErrorCode(admitN.err))
	}
	if got := admitN.req.admit.adm.Receipt; got.ID != "a-1" || got.State != fencegate.ReceiptPending {
		t.Fatalf("res/n segment 1: receipt %q %s, want a-1 PENDING", got.ID, got.State)
	}
	row, err := b.Resource(ctx, "res/n")
	if err != nil {
		t.Fatal(err)
	}
	if row.PendingReceipt != "a-1" || row.LastSegmentSeq != 1 {
		t.Fatalf("res/n pending %q at segment %d: want a-1 at 1", row.PendingReceipt, row.LastSegmentSeq)
	}
	if q, err := b.Quarantined(ctx, "res/n", fencegate.Page{}); err != nil || len(q.Records) != 0 {
		t.Fatalf("quarantine records on res/n: %+v, %v; want none", q.Records, err)
	}
}

// TestALockTimeoutIsBackendUnavailableAndChangesNothing: a write that waits
// for a row lock longer than the session's lock_timeout (SQLSTATE 55P03,
// lock_not_available) is refused as BACKEND_UNAVAILABLE, the database being
// unable to do it now, not INTERNAL; nothing of it was written, and the
// same admission goes through once the lock is released.
func TestALockTimeoutIsBackendUnavailableAndChangesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testenv.PostgresURL(t)
	s, now := withSettled(ctx, t, dsn+"&lock_timeout=100ms", "res/l", "l-1")
	before, err := s.Resource(ctx, "res/l")
	if err != nil {
		t.Fatal(err)
	}
	hold := otherTx(ctx, t, dsn)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM fence_resources WHERE resource = 'res/l' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	_, err = s.Admit(ctx, writeReq("res/l", 2, "l-2", now))
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("admission behind a lock held past lock_timeout: %v (code %s), want BACKEND_UNAVAILABLE", err, fencegate.ErrorCode(err))
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := s.Resource(ctx, "res/l")
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("res/l changed by a refused admission: %+v, was %+v", after, before)
	}
	if _, err := s.Receipt(ctx, "l-2"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("receipt l-2 after the refusal: %v, want NOT_FOUND", err)
	}
	if _, err := s.Admit(ctx, writeReq("res/l", 2, "l-2", now)); err != nil {
		t.Fatalf("the same admission once the lock is released: %v", err)
	}
}

// TestAnAdmissionRacingTheCompactionOfItsLiveReceiptIsRefusedAsDocumented:
// a compaction deletes a resource's old live receipt (segment 1 of 2,
// settled) without the resource's lock, while an admission of segment 1
// with another payload, which would be quarantined against it, is decided.
// The admission reads live receipts FOR KEY SHARE, so it waits for the
// delete to end and finds no receipt: SEGMENT_OUT_OF_ORDER, nothing
// written (and a compaction that came second would skip the receipt it
// holds). It read them unlocked, decided QUARANTINED on the receipt the
// compaction then deleted, and its quarantine record's foreign key failed:
// INTERNAL.
func TestAnAdmissionRacingTheCompactionOfItsLiveReceiptIsRefusedAsDocumented(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, s, now, before := compactableLive(ctx, t)
	compaction := otherTx(ctx, t, dsn)
	// What CompactReceipts' statement does for c-1, left uncommitted.
	if tag, err := compaction.Exec(ctx, `DELETE FROM fence_receipts WHERE receipt_id IN (
		SELECT receipt_id FROM fence_receipts WHERE receipt_id = 'c-1' FOR UPDATE SKIP LOCKED)`); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("compaction of c-1: %v, %v", tag, err)
	}
	done := make(chan struct{})
	var aerr error
	go func() {
		defer close(done)
		_, aerr = s.Admit(ctx, writeReq("res/c", 1, "c-3", now)) // another payload than c-1's
	}()
	waitUntilBlocked(ctx, t, s, compaction, done, "", "the admission did not wait for the compaction")
	if err := compaction.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if c := fencegate.ErrorCode(aerr); c != fencegate.CodeSegmentOutOfOrder && c != fencegate.CodeQuarantined {
		t.Fatalf("segment 1 again while its receipt is compacted: %v (code %s), want SEGMENT_OUT_OF_ORDER or QUARANTINED", aerr, c)
	}
	after, err := s.Resource(ctx, "res/c")
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("res/c changed by a refused admission: %+v, was %+v", after, before)
	}
	if _, err := s.Receipt(ctx, "c-3"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("receipt c-3 after the refusal: %v, want NOT_FOUND", err)
	}
	q, err := s.Quarantined(ctx, "res/c", fencegate.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if fencegate.ErrorCode(aerr) == fencegate.CodeSegmentOutOfOrder && len(q.Records) != 0 {
		t.Fatalf("quarantine records on res/c after SEGMENT_OUT_OF_ORDER: %+v", q.Records)
	}
}

// TestACompactionSkipsTheLiveReceiptAnAdmissionQuarantinesAgainst: the
// other order of the race above. The admission has read c-1 (FOR KEY
// SHARE) and decided QUARANTINED, and its record waits (for another
// session's uncommitted record of the same ID); a compaction meanwhile
// skips c-1, so the record is written naming c-1, which stays. It used to
// delete c-1, and the record's foreign key failed: INTERNAL.
func TestACompactionSkipsTheLiveReceiptAnAdmissionQuarantinesAgainst(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn, s, now, _ := compactableLive(ctx, t)
	req := writeReq("res/c", 1, "c-3", now) // another payload than c-1's
	g := &req.Grant
	hold := otherTx(ctx, t, dsn)
	if _, err := hold.Exec(ctx, `INSERT INTO fence_quarantine (`+quarantineCols+`)
		VALUES ($1, 'res/c', $2, 1, 'res/c', 'PUT', '', 'c-2', $3, 0, NULL, 'o', $4, $4, 1, '', '')`,
		fencegate.QuarantineID(g.Resource, g.FenceToken, 1, req.Target, req.Method, req.EffectKey, req.PayloadDigest),
		num(g.FenceToken), req.PayloadDigest, now); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var aerr error
	go func() { defer close(done); _, aerr = s.Admit(ctx, req) }()
	waitUntilBlocked(ctx, t, s, hold, done, "INSERT INTO fence_quarantine", "the admission's record did not wait")
	if n, err := s.CompactReceipts(ctx, now.Add(time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("compaction while an admission holds c-1: %d deleted, %v; want none", n, err)
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if fencegate.ErrorCode(aerr) != fencegate.CodeQuarantined {
		t.Fatalf("segment 1 again with another payload: %v (code %s), want QUARANTINED", aerr, fencegate.ErrorCode(aerr))
	}
	if _, err := s.Receipt(ctx, "c-1"); err != nil {
		t.Fatalf("c-1, which a quarantine record names: %v", err)
	}
	if q, err := s.Quarantined(ctx, "res/c", fencegate.Page{}); err != nil || len(q.Records) != 1 || q.Records[0].ReceiptID != "c-1" {
		t.Fatalf("quarantine records on res/c: %+v, %v; want one naming c-1", q.Records, err)
	}
}

// compactableLive opens a store (closed with t) whose res/c has segments 1
// (c-1, a compactable live receipt) and 2 (c-2) admitted and settled
// COMMITTED, and returns it with its dsn, the time it wrote at and res/c's
// state.
func compactableLive(ctx context.Context, t *testing.T) (string, *Store, time.Time, fencegate.ResourceState) {
	t.Helper()
	dsn := testenv.PostgresURL(t)
	s, now := withSettled(ctx, t, dsn, "res/c", "c-1")
	if _, err := s.Admit(ctx, writeReq("res/c", 2, "c-2", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(ctx, "c-2", committed("v-2", now)); err != nil {
		t.Fatal(err)
	}
	row, err := s.Resource(ctx, "res/c")
	if err != nil {
		t.Fatal(err)
	}
	return dsn, s, now, row
}

// waitingOnQ sets up two replicas of one fresh store, a (whose batch will
// wait) and b; a has admitted res/q's segment 1 (q-1, pending), and tx,
// another session, holds res/q's row lock.
func waitingOnQ(ctx context.Context, t *testing.T) (dsn string, a, b *Store, tx pgx.Tx, now time.Time) {
	t.Helper()
	dsn = testenv.PostgresURL(t)
	for _, s := range []**Store{&a, &b} {
		st, err := Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		*s = st
	}
	now = time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := a.Admit(ctx, writeReq("res/q", 1, "q-1", now)); err != nil {
		t.Fatal(err)
	}
	tx = otherTx(ctx, t, dsn)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM fence_resources WHERE resource = 'res/q' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	return dsn, a, b, tx, now
}

// withSettled opens a store on dsn (closed with t) whose resource res has
// segment 1 admitted (receipt id) and settled COMMITTED, and returns it with
// the time it wrote at.
func withSettled(ctx context.Context, t *testing.T, dsn, res, id string) (*Store, time.Time) {
	t.Helper()
	s, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	now := time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := s.Admit(ctx, writeReq(res, 1, id, now)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(ctx, id, committed("v-1", now)); err != nil {
		t.Fatal(err)
	}
	return s, now
}
