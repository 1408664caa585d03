package postgres

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

func grant(res string) fencegate.VerifiedGrant {
	return fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: res, Owner: "o", Lease: "l", FenceToken: 9,
		OperationID: "op", OperationRoot: "r", IssuedAt: 1}, Digest: "sha256:g"}
}

func admitMember(res, id string, seg uint64, now time.Time) *member[*admitCall] {
	return &member[*admitCall]{ctx: context.Background(), req: &admitCall{req: fencegate.AdmitRequest{
		Grant: grant(res), Segment: seg, Target: res, Method: "PUT", PayloadDigest: "sha256:" + id, ReceiptID: id, Now: now}}}
}

// TestOneBatchIsolatesAMemberTheDatabaseRefuses runs one admission batch
// (forced, not left to timing) in which one member reuses a receipt ID, so
// the database refuses its INSERT and the batch's transaction rolls back:
// the others must be admitted all the same (run again one by one), the
// refused one gets INVALID_REQUEST and leaves no row (and the receipt whose
// ID it reused as it was); a rule refusal in the same batch leaves none
// either. Then one settle batch with an unknown receipt settles the rest.
func TestOneBatchIsolatesAMemberTheDatabaseRefuses(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := st.Admit(ctx, admitMember("res/first", "r-first", 1, now).req.req); err != nil {
		t.Fatal(err)
	}
	ms := []*member[*admitCall]{
		admitMember("res/a", "r-a", 1, now),
		admitMember("res/dup", "r-first", 1, now), // the receipt ID is taken
		admitMember("res/b", "r-b", 1, now),
		admitMember("res/late", "r-late", 2, now), // a new fence starts at segment 1
		admitMember("res/c", "r-c", 1, now),
	}
	st.runAdmits(ctx, ms)
	for i, want := range []fencegate.Code{"", fencegate.CodeInvalidRequest, "", fencegate.CodeSegmentOutOfOrder, ""} {
		m := ms[i]
		got := fencegate.ErrorCode(m.err)
		if m.err == nil {
			got = ""
		}
		if got != want {
			t.Errorf("member %s: %v, want %q", m.req.req.Grant.Resource, m.err, want)
		}
		if want != "" {
			if _, err := st.Resource(ctx, m.req.req.Grant.Resource); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
				t.Errorf("refused %s left state: %v", m.req.req.Grant.Resource, err)
			}
			if _, err := st.Binding(ctx, m.req.req.Target); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
				t.Errorf("refused %s left a binding: %v", m.req.req.Target, err)
			}
			continue
		}
		if m.req.adm.Receipt.ID != m.req.req.ReceiptID {
			t.Errorf("member %s: admission %+v", m.req.req.Grant.Resource, m.req.adm)
		}
		row, err := st.Resource(ctx, m.req.req.Grant.Resource)
		if err != nil || row.PendingReceipt != m.req.req.ReceiptID || row.LastSegmentSeq != 1 {
			t.Errorf("member %s: state %+v, %v", m.req.req.Grant.Resource, row, err)
		}
	}
	// The receipt whose ID the refused member reused is as it was.
	if r, err := st.Receipt(ctx, "r-first"); err != nil || r.Resource != "res/first" || r.State != fencegate.ReceiptPending {
		t.Errorf("r-first after a member reused its ID: %+v, %v", r, err)
	}
	if row, err := st.Resource(ctx, "res/first"); err != nil || row.PendingReceipt != "r-first" || row.LastSegmentSeq != 1 {
		t.Errorf("res/first after a member reused its receipt ID: %+v, %v", row, err)
	}
	var ss []*member[*settleCall]
	for _, id := range []string{"r-a", "r-none", "r-b", "r-c", "r-a"} {
		ss = append(ss, &member[*settleCall]{ctx: ctx, req: &settleCall{id: id,
			o: fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-" + id, Now: now}}})
	}
	st.runSettles(ctx, ss)
	for _, m := range ss {
		if m.req.id == "r-none" {
			if fencegate.ErrorCode(m.err) != fencegate.CodeNotFound {
				t.Errorf("settle of an unknown receipt: %v", m.err)
			}
			continue
		}
		if m.err != nil || m.req.out.State != fencegate.ReceiptCommitted {
			t.Errorf("settle %s: %+v, %v", m.req.id, m.req.out, m.err)
		}
		res := "res/" + m.req.id[2:]
		if row, err := st.Resource(ctx, res); err != nil || row.PendingReceipt != "" {
			t.Errorf("%s after settle: %+v, %v", res, row, err)
		}
		if v, _ := st.Version(ctx, res); v != "v-"+m.req.id {
			t.Errorf("version of %s = %q", res, v)
		}
	}
}

// TestGroupBatchesWaitingCallersTogether: a lone caller runs at once in a
// batch of its own; callers that queued while every batch slot was busy run
// together once a slot frees, except a second call on a key already in the
// batch, which runs in a later one.
func TestGroupBatchesWaitingCallersTogether(t *testing.T) {
	var (
		mu    sync.Mutex
		sizes []int
		g     = group[int]{slots: 2}
	)
	g.run = func(ctx context.Context, ms []*member[int]) {
		mu.Lock()
		sizes = append(sizes, len(ms))
		mu.Unlock()
	}
	if _, err := g.do(context.Background(), 1, "alone"); err != nil {
		t.Fatal(err)
	}
	var queued []*member[int]
	for i, k := range []string{"k0", "k1", "k2", "k3", "k4", "k0"} {
		queued = append(queued, &member[int]{ctx: context.Background(), req: i, keys: []string{k}, done: make(chan struct{})})
	}
	g.mu.Lock()
	g.inflight = 2 // every slot busy
	g.queue = append(g.queue, queued...)
	g.kick()
	if len(g.queue) != len(queued) {
		t.Fatalf("a batch started with every slot busy")
	}
	g.inflight-- // one batch ends
	g.kick()
	g.mu.Unlock()
	for _, m := range queued {
		<-m.done
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(sizes, []int{1, 5, 1}) {
		t.Fatalf("batch sizes %v, want the lone call, the five distinct keys, then the repeat", sizes)
	}
}

// TestGroupNeverRunsAKeyInTwoBatchesAtOnce: while a batch holding key k
// runs, a call on k waits even though a slot is free, and a call on another
// key starts a batch beside it at once; the call on k runs when k's batch
// has ended.
func TestGroupNeverRunsAKeyInTwoBatchesAtOnce(t *testing.T) {
	release := make(chan struct{})
	started := make(chan int, 4)
	g := group[int]{slots: 4, run: func(ctx context.Context, ms []*member[int]) {
		started <- ms[0].req
		if ms[0].req == 1 {
			<-release
		}
	}}
	first := make(chan error, 1)
	go func() { _, err := g.do(context.Background(), 1, "k"); first <- err }()
	if n := <-started; n != 1 {
		t.Fatalf("started %d, want the first call", n)
	}
	again := make(chan error, 1)
	go func() { _, err := g.do(context.Background(), 2, "k"); again <- err }()
	for queued := 0; queued == 0; runtime.Gosched() {
		g.mu.Lock()
		queued = len(g.queue)
		g.mu.Unlock()
	}
	if _, err := g.do(context.Background(), 3, "other"); err != nil { // runs beside the first
		t.Fatal(err)
	}
	if n := <-started; n != 3 {
		t.Fatalf("started %d beside the first batch, want the call on the other key", n)
	}
	g.mu.Lock()
	waiting := len(g.queue)
	g.mu.Unlock()
	if waiting != 1 {
		t.Fatalf("%d calls queued while k's batch runs, want the call on k", waiting)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-again; err != nil {
		t.Fatal(err)
	}
	if n := <-started; n != 2 {
		t.Fatalf("started %d, want the second call on k", n)
	}
}

// TestGroupGrowsBatchesInsteadOfMultiplyingThem: beside a running batch of
// three, two queued callers wait although slots are free; a third makes as
// many waiting as running, and the three start together beside it.
func TestGroupGrowsBatchesInsteadOfMultiplyingThem(t *testing.T) {
	started := make(chan int, 4)
	g := group[int]{slots: 4, run: func(ctx context.Context, ms []*member[int]) { started <- len(ms) }}
	var queued []*member[int]
	for i := range 3 {
		queued = append(queued, &member[int]{ctx: context.Background(), req: i, keys: []string{string(rune('a' + i))}, done: make(chan struct{})})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight, g.running = 1, 3 // a batch of three runs
	g.queue = append(g.queue, queued[:2]...)
	g.kick()
	if len(g.queue) != 2 {
		t.Fatalf("a batch of %d started beside a running batch of three", 2-len(g.queue))
	}
	g.queue = append(g.queue, queued[2])
	g.kick()
	if len(g.queue) != 0 || g.inflight != 2 {
		t.Fatalf("%d still queued, %d batches running; want the three started together", len(g.queue), g.inflight)
	}
	if n := <-started; n != 3 {
		t.Fatalf("batch of %d, want 3", n)
	}
}

// TestACallerWhoseDeadlinePassesInARunningBatchIsAnsweredAtOnce: a batch
// runs while any member's context lives, so a member whose own context
// ends meanwhile must be answered then (as a lost answer, errAbandoned),
// not when a batch kept going by a member without a deadline ends.
func TestACallerWhoseDeadlinePassesInARunningBatchIsAnsweredAtOnce(t *testing.T) {
	first, release, ran := make(chan struct{}), make(chan struct{}), make(chan int, 4)
	g := &group[int]{slots: 1, run: func(ctx context.Context, ms []*member[int]) {
		if ms[0].req == 0 {
			<-first // holds the one slot while the next two queue
			return
		}
		ran <- len(ms)
		<-release
		for _, m := range ms {
			m.err = nil
		}
	}}
	go g.do(context.Background(), 0)
	for {
		g.mu.Lock()
		busy := g.inflight == 1
		g.mu.Unlock()
		if busy {
			break
		}
		runtime.Gosched()
	}
	undying := make(chan error, 1)
	go func() { _, err := g.do(context.Background(), 1); undying <- err }()
	ctx, cancel := context.WithCancel(context.Background())
	answered := make(chan error, 1)
	go func() { _, err := g.do(ctx, 2); answered <- err }()
	for {
		g.mu.Lock()
		queued := len(g.queue)
		g.mu.Unlock()
		if queued == 2 {
			break
		}
		runtime.Gosched()
	}
	close(first)
	if n := <-ran; n != 2 {
		t.Fatalf("the batch carried %d members, want both", n)
	}
	cancel()
	select {
	case err := <-answered:
		if !errors.Is(err, errAbandoned) || !errors.Is(err, context.Canceled) {
			t.Fatalf("the abandoned call's answer: %v", err)
		}
	case <-time.After(10 * time.Second): // a guard against a hang, not a speed bound
		t.Fatal("the caller whose context ended waited for the batch")
	}
	close(release)
	if err := <-undying; err != nil {
		t.Fatalf("the member without a deadline: %v", err)
	}
}

// TestGroupGatherHoldsCallersUntilEnoughAreQueued: with WithBatchGather's
// setting the group starts no batch, although every slot is free, until as
// many callers as it waits for are queued, then starts them as one batch; a
// caller left alone starts once the wait has passed (clock and timer
// injected: nothing here sleeps).
func TestGroupGatherHoldsCallersUntilEnoughAreQueued(t *testing.T) {
	started := make(chan int, 4)
	now := time.UnixMilli(1_700_000_000_000)
	var fire func()
	var armedFor time.Duration
	g := &group[int]{slots: 4, gatherFor: time.Second, gatherOps: 3,
		run:       func(ctx context.Context, ms []*member[int]) { started <- len(ms) },
		now:       func() time.Time { return now },
		afterFunc: func(d time.Duration, f func()) { armedFor, fire = d, f }}
	queue := func(i int) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.queue = append(g.queue, &member[int]{ctx: context.Background(), req: i, keys: []string{string(rune('a' + i))},
			done: make(chan struct{}), queued: now})
		g.kick()
	}
	queue(0)
	now = now.Add(100 * time.Millisecond)
	queue(1)
	g.mu.Lock()
	held, inflight := len(g.queue), g.inflight
	g.mu.Unlock()
	if held != 2 || inflight != 0 || armedFor != time.Second {
		t.Fatalf("%d queued, %d batches, timer for %v; want both held, a timer for the first caller's second", held, inflight, armedFor)
	}
	queue(2)
	if n := <-started; n != 3 {
		t.Fatalf("batch of %d, want the three together", n)
	}

	// Alone: held until its own wait has passed. The timer armed for the
	// first caller finds it still young and arms again for what is left;
	// that one starts it.
	first := fire
	fire = nil
	queue(3)
	now = now.Add(900 * time.Millisecond) // the first caller's wait ends
	first()
	if fire == nil || armedFor != 100*time.Millisecond {
		t.Fatalf("a lone caller is held by a timer for %v, want the 100ms its wait has left", armedFor)
	}
	select {
	case n := <-started:
		t.Fatalf("a batch of %d started before the lone caller's wait passed", n)
	default:
	}
	now = now.Add(100 * time.Millisecond)
	fire()
	if n := <-started; n != 1 {
		t.Fatalf("batch of %d, want the lone caller", n)
	}
}

// TestBatchGatherSharesOneCommit: against Postgres, with WithBatchGather,
// admissions of different resources and a settle issued together share one
// transaction, each answered on its own.
func TestBatchGatherSharesOneCommit(t *testing.T) {
	ctx := context.Background()
	st, err := Open(ctx, testenv.PostgresURL(t), WithBatchGather(time.Hour, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	tag := time.Now().Format("150405.000000000")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := admitMember("gather/"+tag+"/"+string(rune('a'+i)), "gather-"+tag+"-"+string(rune('a'+i)), 1, now)
			_, errs[i] = st.Admit(ctx, m.req.req)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errs[3] = st.Settle(ctx, "gather-"+tag+"-none", fencegate.Outcome{State: fencegate.ReceiptCommitted})
	}()
	wg.Wait()
	for i, err := range errs[:3] {
		if err != nil {
			t.Fatalf("admission %d: %v", i, err)
		}
	}
	if fencegate.ErrorCode(errs[3]) != fencegate.CodeNotFound {
		t.Fatalf("settle of an unknown receipt: %v, want NOT_FOUND", errs[3])
	}
	if batches, writes := st.GroupCommits(); batches != 1 || writes != 4 {
		t.Fatalf("%d batches carried %d writes, want the 4 in one", batches, writes)
	}
}

// TestGroupAnswersEveryCallerOfAPanickingBatchAndGoesOn: a panic in a
// batch's run (outside its transaction: runBatch's own steps, say) does
// not end the process: every caller of that batch is answered INTERNAL,
// never left waiting, and the batch's keys and slot are freed, so the next
// call on the same key runs (nothing here sleeps: the gather's timer is
// never needed, the two callers fill it).
func TestGroupAnswersEveryCallerOfAPanickingBatchAndGoesOn(t *testing.T) {
	var logged bytes.Buffer
	s := &Store{}
	WithLogger(slog.New(slog.NewJSONHandler(&logged, nil)))(s) // the process's logger, not slog.Default
	g := &group[int]{log: s.writes.log, slots: 1, gatherFor: time.Hour, gatherOps: 2, afterFunc: func(time.Duration, func()) {},
		run: func(ctx context.Context, ms []*member[int]) {
			if ms[0].req < 2 {
				panic("boom")
			}
		}}
	errs := make(chan error, 2)
	for i, k := range []string{"k", "j"} {
		go func() { _, err := g.do(context.Background(), i, k); errs <- err }()
	}
	for range 2 {
		if err := <-errs; fencegate.ErrorCode(err) != fencegate.CodeInternal {
			t.Fatalf("a caller of the panicking batch: %v, want INTERNAL", err)
		}
	}
	g.mu.Lock()
	g.gatherFor, g.gatherOps = 0, 0
	g.mu.Unlock()
	if _, err := g.do(context.Background(), 2, "k"); err != nil {
		t.Fatalf("the next call on the panicking batch's key: %v", err)
	}
	if !strings.Contains(logged.String(), `"msg":"fence store: a write batch panicked`) || !strings.Contains(logged.String(), `"stack":`) {
		t.Fatalf("the panic was not reported, with its stack, to the logger WithLogger gave: %q", logged.String())
	}
}
