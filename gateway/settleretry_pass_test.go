package gateway

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// firstSettleHangs is a fence store whose first Settle waits for release;
// every Settle is counted.
type firstSettleHangs struct {
	fencegate.FenceStore
	calls            atomic.Int32
	entered, release chan struct{}
}

func (s *firstSettleHangs) Settle(ctx context.Context, id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	if s.calls.Add(1) == 1 {
		close(s.entered)
		<-s.release
	}
	return fencegate.Receipt{ID: id, State: o.State}, nil
}

// TestDrainsPassSettlesNothingBesideTheRetryLoopsPass: while the retry
// loop's pass is inside a Settle, Drain's pass (tryOnce) does not send the
// same outcome again; the outcome is settled exactly once.
func TestDrainsPassSettlesNothingBesideTheRetryLoopsPass(t *testing.T) {
	st := &firstSettleHangs{entered: make(chan struct{}), release: make(chan struct{})}
	spawned := make(chan func(), 1)
	q := &settleRetry{store: st, spawn: func(f func()) { spawned <- f },
		after: func(time.Duration) <-chan time.Time { return make(chan time.Time) },
		log:   slog.New(slog.NewTextHandler(io.Discard, nil))}
	q.add("rcpt_1", fencegate.Outcome{State: fencegate.ReceiptUnknown})
	run, done := <-spawned, make(chan struct{})
	go func() { run(); close(done) }()
	<-st.entered
	if left := q.tryOnce(context.Background()); left != 1 {
		t.Fatalf("Drain's pass beside the loop's: %d left, want 1 (not settled by Drain)", left)
	}
	close(st.release)
	<-done
	if n := st.calls.Load(); n != 1 || q.len() != 0 {
		t.Fatalf("Settle calls %d, left %d; want 1 and 0", n, q.len())
	}
}

// TestRetryQueueKeepsAFinalOutcomeOverAnUnknownOne: an outcome waiting to be
// settled is replaced by a newer one for its receipt (UNKNOWN by a final
// state, one final by another), except that a final one (a reader's proof
// of COMMITTED) is never replaced by UNKNOWN, which would have the store
// record less than a reader was told.
func TestRetryQueueKeepsAFinalOutcomeOverAnUnknownOne(t *testing.T) {
	q := &settleRetry{spawn: func(func()) {}, log: slog.New(slog.DiscardHandler)}
	unknown := fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: "answer lost"}
	committed := fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: `"v1"`}
	q.add("a", unknown)
	q.add("a", committed)
	q.add("a", unknown)
	if got := q.queue["a"]; got != committed {
		t.Fatalf("queued for a: %+v, want the proof of COMMITTED", got)
	}
	failed := fencegate.Outcome{State: fencegate.ReceiptFailed, Error: "refused"}
	q.add("b", unknown)
	q.add("b", failed)
	if got := q.queue["b"]; got != failed {
		t.Fatalf("queued for b: %+v, want FAILED over UNKNOWN", got)
	}
}
