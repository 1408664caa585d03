package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
	"github.com/fencegate/fencegate/internal/pgfault"
)

var _ fencegate.PriorSettling = (*Store)(nil)

// SettlesPrior implements fencegate.PriorSettling: Admit applies
// AdmitRequest.Prior in the admission's own transaction.
func (s *Store) SettlesPrior() bool { return true }

// admitCall is one Admit in a batch.
type admitCall struct {
	req fencegate.AdmitRequest
	adm fencegate.Admission
	// decided: the batch committed and adm (with the member's refusal, if
	// any) is its verdict.
	decided bool
}

// Admit implements fencegate.FenceStore. It joins the next write batch (see
// group.go; admissions and settles share batches) and returns once that
// batch committed. It holds its resource and target as batch keys; a member
// with a prior also holds the prior receipt's ID, resource and target, so no
// other member of its batch touches them (a settle of the prior included).
func (s *Store) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	if err := fencerules.ValidateAdmit(&req); err != nil {
		return fencegate.Admission{}, err
	}
	keys, err := s.admitKeys(ctx, &req)
	if err != nil {
		return fencegate.Admission{}, translate(err, "admit")
	}
	a := &admitCall{req: req}
	if _, err := s.writes.do(ctx, &writeCall{admit: a}, keys...); err != nil {
		if !errors.Is(err, errAbandoned) && a.decided && req.Prior != nil {
			return a.adm, translate(err, "admit") // a ruling: the prior settle committed
		}
		return fencegate.Admission{}, translate(err, "admit")
	}
	return a.adm, nil
}

// admitKeys are an admission's batch keys: its resource and target, its
// receipt's ID (so that a settle of that receipt, queued by a caller that
// gave up on the admission, waits for the batch that may still commit it
// instead of answering NOT_FOUND beside it), and its prior's (priorKeys).
func (s *Store) admitKeys(ctx context.Context, req *fencegate.AdmitRequest) ([]string, error) {
	keys := []string{"r\x00" + req.Grant.Resource, "t\x00" + req.Target, "p\x00" + req.ReceiptID}
	if p := req.Prior; p != nil {
		more, err := s.priorKeys(ctx, p.ReceiptID)
		if err != nil {
			return nil, err
		}
		keys = append(keys, more...)
	}
	return keys, nil
}

// priorKeys are the batch keys of a prior receipt: its ID, resource and
// target (both immutable, so read without a lock when not known).
func (s *Store) priorKeys(ctx context.Context, id string) ([]string, error) {
	keys, known := s.receiptKeys(id)
	if known {
		return keys, nil
	}
	var res, target string
	err := s.pool.QueryRow(ctx, `SELECT resource, target FROM fence_receipts WHERE receipt_id = $1`, id).Scan(&res, &target)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return keys, nil // the batch answers NOT_FOUND
	case err != nil:
		return nil, err
	}
	return append(keys, "r\x00"+res, "t\x00"+target), nil
}

// commit sends b's statements and COMMIT in one round trip. uncertain is
// true for an error that leaves it open whether the transaction committed.
func commit(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch) (uncertain bool, err error) {
	b.Queue(`COMMIT`)
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return !refusedStatement(err), err
	}
	return false, nil
}

// refusedStatement reports whether err, the answer to a pipeline that ends
// in COMMIT, proves the transaction rolled back: the server refused one of
// its statements (severity ERROR; the rest, COMMIT included, was skipped up
// to the Sync). A server error that ends the session (FATAL or PANIC, e.g.
// 57P01 "terminating connection due to administrator command" when the
// backend is told to stop) or one of the unavailable classes (08, 57, 58) can
// arrive after COMMIT completed: the server reports it when it next checks
// for interrupts, which may be after COMMIT's CommandComplete and before
// ReadyForQuery (PostgreSQL manual, "Message Flow: Extended Query" and
// "Termination"; Appendix A). Such an answer, like a lost connection, leaves
// the outcome open: running the members again would find their own
// admissions and answer them as replays that forward nothing.
func refusedStatement(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	sev := pe.SeverityUnlocalized
	if sev == "" {
		sev = pe.Severity
	}
	return sev == "ERROR" && !pgfault.UnavailableState(pe.Code)
}
