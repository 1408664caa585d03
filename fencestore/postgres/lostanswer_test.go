package postgres

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// loseAnswer wraps the pool's connections: once armed with a string, the
// first write carrying it (a batch's Bind holds its arguments' text) is
// sent, then the server's whole answer is read up to its ReadyForQuery and
// thrown away, and the connection fails: the transaction ran to its end
// (COMMIT included) and the client never learns how.
type loseAnswer struct {
	mu    sync.Mutex
	armed string
	lost  atomic.Int64
	// random > 0: also lose the answer of one in random writes that carry
	// a payload digest, version or error of the replica tests' writers.
	random int
	n      int
}

func (l *loseAnswer) arm(s string) { l.mu.Lock(); l.armed = s; l.mu.Unlock() }

type lossyConn struct {
	net.Conn
	l        *loseAnswer
	swallow  bool
	dead     bool
	consumed []byte
}

func (c *lossyConn) Write(p []byte) (int, error) {
	c.l.mu.Lock()
	if c.l.armed != "" && bytes.Contains(p, []byte(c.l.armed)) {
		c.l.armed, c.swallow = "", true
	}
	if c.l.random > 0 && (bytes.Contains(p, []byte("sha256:w")) || bytes.Contains(p, []byte("v-w")) || bytes.Contains(p, []byte("boom"))) {
		if c.l.n++; c.l.n%c.l.random == 0 {
			c.swallow = true
		}
	}
	c.l.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *lossyConn) Read(p []byte) (int, error) {
	if c.dead {
		return 0, io.ErrUnexpectedEOF
	}
	if !c.swallow {
		return c.Conn.Read(p)
	}
	buf := make([]byte, 8192)
	for !bytes.Contains(c.consumed, []byte("Z\x00\x00\x00\x05")) {
		n, err := c.Conn.Read(buf)
		c.consumed = append(c.consumed, buf[:n]...)
		if err != nil {
			break
		}
	}
	c.l.lost.Add(1)
	c.dead = true
	_ = c.Conn.Close()
	return 0, io.ErrUnexpectedEOF
}

func openLossy(t *testing.T, dsn string) (*Store, *loseAnswer) {
	t.Helper()
	l := &loseAnswer{}
	s, err := open(context.Background(), dsn, func(c *pgxpool.Config) {
		dial := c.ConnConfig.DialFunc
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			nc, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &lossyConn{Conn: nc, l: l}, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, l
}

// TestALostCommitAnswerIsUncertainAndForgotten: a batch whose COMMIT ran
// but whose answer was lost is answered BACKEND_UNAVAILABLE (never run
// again as if it had rolled back: a rerun would find its own admission and
// answer a replay that forwards nothing), the same request sent again is
// answered as the replay it now is, and the store's cache of what it last
// committed keeps nothing the lost transaction may have changed: here the
// row of a prior's resource (another resource, whose receipt the cache did
// not hold), which the lost transaction cleared.
func TestALostCommitAnswerIsUncertainAndForgotten(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgresURL(t)
	a, l := openLossy(t, dsn)
	b, _ := openTraced(t, dsn)
	now := time.UnixMilli(1_700_000_000_000).UTC()

	// Fast path: segment 2 of a resource A knows.
	if _, err := a.Admit(ctx, writeReq("res/f", 1, "f-1", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Settle(ctx, "f-1", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1", Now: now}); err != nil {
		t.Fatal(err)
	}
	l.arm("f-2")
	fast := a.fast.Load()
	if _, err := a.Admit(ctx, writeReq("res/f", 2, "f-2", now)); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("admission whose COMMIT answer was lost: %v, want BACKEND_UNAVAILABLE", err)
	}
	if l.lost.Load() != 1 || a.fast.Load() != fast {
		t.Fatalf("lost answers %d, fast commits %d: the lost one must be the fast batch's", l.lost.Load(), a.fast.Load()-fast)
	}
	if _, ok := a.known.row("res/f"); ok {
		t.Error("the cache kept res/f after a lost COMMIT answer")
	}
	if adm, err := a.Admit(ctx, writeReq("res/f", 2, "f-2", now)); err != nil || !adm.Replay {
		t.Fatalf("the same admission again: %+v, %v; want the replay of the committed one", adm, err)
	}

	// Locked path: a prior of another resource, whose receipt (admitted by
	// B) A never held; A knows its row from a refused admission.
	if _, err := b.Admit(ctx, writeReq("res/p", 1, "p-1", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admit(ctx, writeReq("res/p", 2, "p-2", now)); fencegate.ErrorCode(err) != fencegate.CodeResourceBusy {
		t.Fatalf("admission behind B's pending receipt: %v, want RESOURCE_BUSY", err)
	}
	if row, ok := a.known.row("res/p"); !ok || row.PendingReceipt != "p-1" {
		t.Fatalf("A's cache of res/p: %+v, %v", row, ok)
	}
	if _, err := a.Settle(ctx, "f-2", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v2", Now: now}); err != nil {
		t.Fatal(err)
	}
	req := writeReq("res/f", 3, "f-3", now)
	req.Prior = &fencegate.PriorSettle{ReceiptID: "p-1", Outcome: fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "vp", Now: now}}
	l.arm("f-3")
	if _, err := a.Admit(ctx, req); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("admission with a prior whose COMMIT answer was lost: %v, want BACKEND_UNAVAILABLE", err)
	}
	if l.lost.Load() != 2 {
		t.Fatalf("lost answers %d, want 2", l.lost.Load())
	}
	if db, _ := b.Resource(ctx, "res/p"); db.PendingReceipt != "" {
		t.Fatalf("res/p after the lost COMMIT: %+v; the test needs the transaction committed", db)
	}
	if row, ok := a.known.row("res/p"); ok && row.PendingReceipt != "" {
		t.Errorf("after a lost COMMIT answer the cache still says res/p is pending %s; the database cleared it", row.PendingReceipt)
	}
	if adm, err := a.Admit(ctx, req); err != nil || !adm.Replay {
		t.Fatalf("the same admission again: %+v, %v; want the replay", adm, err)
	}
}

// TestALostSettleAnswerForgetsTheRow: a settle whose COMMIT ran but whose
// answer was lost is BACKEND_UNAVAILABLE, the cache keeps nothing it may
// have changed (here the pending mark of a receipt another replica
// admitted, which the cache did not hold, on a row it knew from a refused
// admission), and the settle sent again is the idempotent repeat.
func TestALostSettleAnswerForgetsTheRow(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.PostgresURL(t)
	a, l := openLossy(t, dsn)
	b, _ := openTraced(t, dsn)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := b.Admit(ctx, writeReq("res/s", 1, "s-1", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admit(ctx, writeReq("res/s", 2, "s-2", now)); fencegate.ErrorCode(err) != fencegate.CodeResourceBusy {
		t.Fatalf("admission behind B's pending receipt: %v, want RESOURCE_BUSY", err)
	}
	if row, ok := a.known.row("res/s"); !ok || row.PendingReceipt != "s-1" {
		t.Fatalf("A's cache of res/s: %+v, %v", row, ok)
	}
	o := fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-lost-settle", Now: now}
	l.arm("v-lost-settle")
	if _, err := a.Settle(ctx, "s-1", o); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("settle whose COMMIT answer was lost: %v, want BACKEND_UNAVAILABLE", err)
	}
	if db, _ := b.Resource(ctx, "res/s"); l.lost.Load() != 1 || db.PendingReceipt != "" {
		t.Fatalf("lost answers %d, res/s %+v: the test needs the settle committed and its answer lost", l.lost.Load(), db)
	}
	if row, ok := a.known.row("res/s"); ok && row.PendingReceipt != "" {
		t.Errorf("after a lost COMMIT answer the cache still says res/s is pending %s; the database cleared it", row.PendingReceipt)
	}
	if r, err := a.Settle(ctx, "s-1", o); err != nil || r.State != fencegate.ReceiptCommitted {
		t.Fatalf("the same settle again: %+v, %v", r, err)
	}
}
