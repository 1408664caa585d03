package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestGroupStartsBesideStalledBatches: beside a running batch of three, a
// lone caller waits (the growth rule) and arms the stall timer for
// stallAfter after that batch started; when it fires with the clock there,
// the caller's batch starts in a free slot although the first never ends.
func TestGroupStartsBesideStalledBatches(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	var (
		fire  func()
		delay time.Duration
	)
	release := make(chan struct{})
	ran := make(chan int, 2)
	g := group[int]{slots: 4, now: func() time.Time { return clock },
		afterFunc: func(d time.Duration, f func()) { delay, fire = d, f },
		run: func(ctx context.Context, ms []*member[int]) {
			ran <- len(ms)
			if len(ms) == 3 {
				<-release // stalled, as on a row lock held elsewhere
			}
		}}
	defer close(release)
	g.mu.Lock()
	for i := range 3 {
		g.queue = append(g.queue, &member[int]{ctx: context.Background(), req: i, keys: []string{string(rune('a' + i))}, done: make(chan struct{})})
	}
	g.kick()
	g.mu.Unlock()
	if n := <-ran; n != 3 {
		t.Fatalf("first batch of %d, want 3", n)
	}
	clock = clock.Add(time.Millisecond)
	lone := &member[int]{ctx: context.Background(), req: 9, keys: []string{"z"}, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, lone) // as do queues a caller
	g.kick()
	queued, armed := len(g.queue), g.armed
	g.mu.Unlock()
	if queued != 1 || !armed {
		t.Fatalf("lone caller: queued %v, stall timer armed %v; want it waiting beside the batch of three, the timer armed", queued == 1, armed)
	}
	if delay != stallAfter-time.Millisecond {
		t.Fatalf("stall timer set for %v, want %v (stallAfter after the batch started)", delay, stallAfter-time.Millisecond)
	}
	clock = clock.Add(stallAfter)
	fire()
	if n := <-ran; n != 1 {
		t.Fatalf("batch of %d beside the stalled one, want the lone caller", n)
	}
	<-lone.done
}

// TestAStalledBatchHoldsUpOnlyItsOwnMembers: a batch of three admissions
// waits on res/q's row, which another transaction (another replica, an
// operator's session) holds; an admission on an unrelated resource is
// admitted meanwhile, in a slot of its own, before that lock is released.
func TestAStalledBatchHoldsUpOnlyItsOwnMembers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := testenv.PostgresURL(t)
	s, now := withSettled(ctx, t, dsn, "res/q", "q-1")
	tx := otherTx(ctx, t, dsn)
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM fence_resources WHERE resource = 'res/q' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var ms []*member[*writeCall]
	for _, req := range []fencegate.AdmitRequest{writeReq("res/q", 2, "q-2", now), writeReq("res/d", 1, "d-1", now), writeReq("res/e", 1, "e-1", now)} {
		keys, _ := s.admitKeys(ctx, &req)
		ms = append(ms, &member[*writeCall]{ctx: ctx, req: &writeCall{admit: &admitCall{req: req}}, keys: keys, done: make(chan struct{})})
	}
	s.writes.mu.Lock()
	s.writes.queue = append(s.writes.queue, ms...)
	s.writes.kick()
	s.writes.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, m := range ms {
			<-m.done
		}
	}()
	waitUntilBlocked(ctx, t, s, tx, done, "UPDATE fence_resources", "the batch did not wait for res/q")
	// The lock is held until this returns: a deadline only to fail
	// instead of hanging, far above stallAfter.
	lone, cancelLone := context.WithTimeout(ctx, 10*time.Second)
	defer cancelLone()
	if _, err := s.Admit(lone, writeReq("res/f", 1, "f-1", now)); err != nil {
		t.Fatalf("an admission on res/f while a batch waits on res/q: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	for _, m := range ms {
		if m.err != nil {
			t.Fatalf("stalled member %s: %v", m.req.admit.req.Grant.Resource, m.err)
		}
	}
}

// TestRunBatchCountsOnlyWhatCommitted: the group-commit counters take what
// runBatch reports, which is committed transactions only: a batch refused
// and run again member by member counts each member that committed (not
// the refused one, nor the refused batch); an uncertain COMMIT counts
// nothing; a batch that commits counts once with all its members.
func TestRunBatchCountsOnlyWhatCommitted(t *testing.T) {
	refused := fencegate.Errorf(fencegate.CodeInvalidRequest, "refused")
	ms := func() []*member[int] {
		return []*member[int]{{req: 0}, {req: 1}, {req: 2}}
	}
	forget := func([]*member[int]) {}
	got := ms()
	c, n := runBatch(context.Background(), got, func(_ context.Context, b []*member[int], _ bool) (bool, error) {
		if len(b) > 1 || b[0].req == 1 {
			return false, refused
		}
		return false, nil
	}, forget)
	if c != 2 || n != 2 || got[1].err == nil || got[0].err != nil || got[2].err != nil {
		t.Fatalf("one member refused: %d commits, %d members (errs %v %v %v); want 2 and 2, only member 1 refused", c, n, got[0].err, got[1].err, got[2].err)
	}
	c, n = runBatch(context.Background(), ms(), func(context.Context, []*member[int], bool) (bool, error) { return true, refused }, forget)
	if c != 0 || n != 0 {
		t.Fatalf("uncertain: %d commits, %d members; want none", c, n)
	}
	c, n = runBatch(context.Background(), ms(), func(context.Context, []*member[int], bool) (bool, error) { return false, nil }, forget)
	if c != 1 || n != 3 {
		t.Fatalf("committed: %d commits, %d members; want 1 and 3", c, n)
	}
}
