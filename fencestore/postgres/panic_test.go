package postgres

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/internal/fencerules"
	"github.com/fencegate/fencegate/internal/testenv"
)

// panicAt is a pgx tracer that makes one write batch panic, as a bug in it
// would: the first pgx batch ending in COMMIT whose arguments carry arg
// panics when it starts (nothing of it sent; on the locked path its
// transaction is open and holds its row locks), or, with afterCommit, once
// its COMMIT was acknowledged (its pipeline not yet read to the end). It
// keeps the connection it panicked on.
type panicAt struct {
	afterCommit bool

	mu   sync.Mutex
	arg  string
	conn *pgx.Conn
}

type panicBatch struct{}

func (p *panicAt) arm(arg string) { p.mu.Lock(); p.arg = arg; p.mu.Unlock() }

// panicked is the connection the batch panicked on (nil: none did).
func (p *panicAt) panicked() *pgx.Conn { p.mu.Lock(); defer p.mu.Unlock(); return p.conn }

func (p *panicAt) fire(c *pgx.Conn, at string) {
	p.mu.Lock()
	p.conn = c
	p.mu.Unlock()
	panic("test: a write batch panics " + at)
}

func (p *panicAt) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	qs := d.Batch.QueuedQueries
	p.mu.Lock()
	armed := p.arg != "" && len(qs) > 0 && qs[len(qs)-1].SQL == "COMMIT"
	if armed {
		var args []any
		for _, q := range qs {
			args = append(args, q.Arguments...)
		}
		armed = strings.Contains(fmt.Sprint(args...), p.arg)
	}
	if armed {
		p.arg = "" // once
	}
	p.mu.Unlock()
	switch {
	case !armed:
		return ctx
	case !p.afterCommit:
		p.fire(c, "as it starts")
	}
	return context.WithValue(ctx, panicBatch{}, true)
}

func (p *panicAt) TraceBatchQuery(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	if ctx.Value(panicBatch{}) != nil && d.SQL == "COMMIT" && d.Err == nil {
		p.fire(c, "after its COMMIT")
	}
}

func (p *panicAt) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
func (p *panicAt) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (p *panicAt) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func openPanicking(t *testing.T, afterCommit bool) (*Store, *panicAt) {
	t.Helper()
	tr := &panicAt{afterCommit: afterCommit}
	s, err := open(context.Background(), testenv.PostgresURL(t), func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, tr
}

// gather makes the store's next n calls issued together one batch (0: off).
func gather(s *Store, n int) {
	s.writes.mu.Lock()
	defer s.writes.mu.Unlock()
	s.writes.gatherFor, s.writes.gatherOps = 0, 0
	if n > 1 {
		s.writes.gatherFor, s.writes.gatherOps = time.Hour, n
	}
}

// together runs calls at once and returns their errors, in order; a call
// still waiting after a minute fails with its context's error (a guard
// against a hang, not a speed bound).
func together(calls ...func(ctx context.Context) error) []error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = call(ctx) }()
	}
	wg.Wait()
	return errs
}

// snapshot reads resources' rows and receipts as the store holds them.
func snapshot(t *testing.T, s *Store, resources, receipts []string) map[string]any {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	for _, res := range resources {
		row, err := s.Resource(ctx, res)
		v, verr := s.Version(ctx, res)
		out["row "+res] = fmt.Sprint(row, err, v, verr)
	}
	for _, id := range receipts {
		r, err := s.Receipt(ctx, id)
		out["receipt "+id] = fmt.Sprint(r, fencegate.ErrorCode(err))
	}
	return out
}

// TestAPanickingBatchAnswersEveryCallerInternalAndChangesNothing: a write
// batch (two admissions and a settle, on the locked path) that panics with
// its transaction open and its row locks held does not end the process:
// every caller is answered INTERNAL (not a ruling: the gateway reads the
// receipt back, or keeps the settle to retry) with no verdict, nothing of
// the batch is stored, the connection is closed rather than put back in the
// pool (so its locks go), and the same calls made again then succeed.
func TestAPanickingBatchAnswersEveryCallerInternalAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	s, tr := openPanicking(t, false)
	s.lockedOnly = true
	now := time.UnixMilli(1_700_000_000_000).UTC()
	for _, res := range []string{"res/p", "res/q", "res/s"} {
		if _, err := s.Admit(ctx, writeReq(res, 1, res+"-1", now)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"res/p-1", "res/q-1"} {
		if _, err := s.Settle(ctx, id, committed("v-"+id, now)); err != nil {
			t.Fatal(err)
		}
	}
	resources := []string{"res/p", "res/q", "res/s"}
	receipts := []string{"res/p-1", "res/q-1", "res/s-1", "res/p-2", "res/q-2"}
	before := snapshot(t, s, resources, receipts)

	var (
		admP, admQ fencegate.Admission
		settled    fencegate.Receipt
	)
	calls := []func(ctx context.Context) error{
		func(ctx context.Context) (err error) {
			admP, err = s.Admit(ctx, writeReq("res/p", 2, "res/p-2", now))
			return err
		},
		func(ctx context.Context) (err error) {
			admQ, err = s.Admit(ctx, writeReq("res/q", 2, "res/q-2", now))
			return err
		},
		func(ctx context.Context) (err error) {
			settled, err = s.Settle(ctx, "res/s-1", committed("v-s1", now))
			return err
		},
	}
	gather(s, 3)
	tr.arm("res/p-2")
	for i, err := range together(calls...) {
		if fencegate.ErrorCode(err) != fencegate.CodeInternal {
			t.Errorf("caller %d of the panicking batch: %v, want INTERNAL", i, err)
		}
	}
	if admP != (fencegate.Admission{}) || admQ != (fencegate.Admission{}) || !reflect.DeepEqual(settled, fencegate.Receipt{}) {
		t.Errorf("the panicking batch answered verdicts: %+v, %+v, %+v", admP, admQ, settled)
	}
	if c := tr.panicked(); c == nil || !c.IsClosed() {
		t.Fatalf("the panicking batch's connection is not closed (seen: %t)", c != nil)
	}
	if after := snapshot(t, s, resources, receipts); !reflect.DeepEqual(after, before) {
		t.Errorf("the panicking batch changed the store:\nbefore %v\nafter  %v", before, after)
	}

	for i, err := range together(calls...) {
		if err != nil {
			t.Errorf("caller %d after the panic: %v", i, err)
		}
	}
	if admP.Receipt.ID != "res/p-2" || admQ.Receipt.ID != "res/q-2" || settled.State != fencegate.ReceiptCommitted {
		t.Errorf("after the panic: %+v, %+v, %+v", admP, admQ, settled)
	}
}

// TestABatchThatPanicsAfterItsCommitAnswersInternalAndStaysCommitted: a
// write batch (an admission and a settle, on the fast path) that panics
// once its COMMIT was acknowledged answers both callers INTERNAL with no
// verdict, although the commit stands: exactly the batch's writes are
// stored (the admission's receipt PENDING and its row moved, the settle's
// receipt COMMITTED and its row's pending mark cleared), which is what the
// gateway finds when it reads the receipt back, and the one it settles or
// retries. The connection is closed, and the resource's next calls succeed.
func TestABatchThatPanicsAfterItsCommitAnswersInternalAndStaysCommitted(t *testing.T) {
	ctx := context.Background()
	s, tr := openPanicking(t, true)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	for _, res := range []string{"res/a", "res/b"} {
		if _, err := s.Admit(ctx, writeReq(res, 1, res+"-1", now)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Settle(ctx, "res/a-1", committed("v-a1", now)); err != nil {
		t.Fatal(err)
	}
	req := writeReq("res/a", 2, "res/a-2", now)
	var (
		adm     fencegate.Admission
		settled fencegate.Receipt
	)
	gather(s, 2)
	tr.arm("res/a-2")
	errs := together(
		func(ctx context.Context) (err error) { adm, err = s.Admit(ctx, req); return err },
		func(ctx context.Context) (err error) {
			settled, err = s.Settle(ctx, "res/b-1", committed("v-b1", now))
			return err
		},
	)
	for i, err := range errs {
		if fencegate.ErrorCode(err) != fencegate.CodeInternal {
			t.Errorf("caller %d of the panicking batch: %v, want INTERNAL", i, err)
		}
	}
	if adm != (fencegate.Admission{}) || !reflect.DeepEqual(settled, fencegate.Receipt{}) {
		t.Errorf("the panicking batch answered verdicts: %+v, %+v", adm, settled)
	}
	if c := tr.panicked(); c == nil || !c.IsClosed() {
		t.Fatalf("the panicking batch's connection is not closed (seen: %t)", c != nil)
	}

	// What committed: the admission, as fencerules writes it...
	row, err := s.Resource(ctx, "res/a")
	if want := fencerules.Accepted(&req); err != nil || !reflect.DeepEqual(row, want) {
		t.Errorf("res/a after the batch: %+v, %v; want %+v", row, err, want)
	}
	r, err := s.Receipt(ctx, "res/a-2")
	if want := fencerules.NewReceipt(&req); err != nil || !reflect.DeepEqual(r, want) {
		t.Errorf("receipt res/a-2: %+v, %v; want %+v", r, err, want)
	}
	if v, err := s.Version(ctx, "res/a"); err != nil || v != "v-a1" {
		t.Errorf("version of res/a %q (%v), want v-a1", v, err)
	}
	// ...and the settle.
	if r, err := s.Receipt(ctx, "res/b-1"); err != nil || r.State != fencegate.ReceiptCommitted || r.Version != "v-b1" {
		t.Errorf("receipt res/b-1: %+v, %v; want COMMITTED v-b1", r, err)
	}
	if row, err := s.Resource(ctx, "res/b"); err != nil || row.PendingReceipt != "" || row.LastSegmentSeq != 1 {
		t.Errorf("res/b after the settle: %+v, %v", row, err)
	}
	if v, err := s.Version(ctx, "res/b"); err != nil || v != "v-b1" {
		t.Errorf("version of res/b %q (%v), want v-b1", v, err)
	}

	gather(s, 0)
	tctx, cancel := context.WithTimeout(ctx, time.Minute) // a guard against a hang
	defer cancel()
	if _, err := s.Settle(tctx, "res/a-2", committed("v-a2", now)); err != nil {
		t.Fatalf("settle of the committed admission: %v", err)
	}
	if adm, err := s.Admit(tctx, writeReq("res/a", 3, "res/a-3", now)); err != nil || adm.Receipt.ID != "res/a-3" || adm.PreviousVersion != "v-a2" {
		t.Fatalf("the next admission on res/a: %+v, %v", adm, err)
	}
}
