package postgres

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// runAdmits runs ms as one write batch of admissions (forced, not left to
// timing) and leaves each member's error on it.
func (s *Store) runAdmits(ctx context.Context, ms []*member[*admitCall]) {
	runAs(ctx, s, ms, func(a *admitCall) *writeCall { return &writeCall{admit: a} })
}

// runSettles is runAdmits for settles.
func (s *Store) runSettles(ctx context.Context, ms []*member[*settleCall]) {
	runAs(ctx, s, ms, func(sc *settleCall) *writeCall { return &writeCall{settle: sc} })
}

// runAs runs ms, each wrapped as a writeCall, as one write batch and leaves
// each member's error on it.
func runAs[T any](ctx context.Context, s *Store, ms []*member[T], wrap func(T) *writeCall) {
	ws := make([]*member[*writeCall], len(ms))
	for i, m := range ms {
		ws[i] = &member[*writeCall]{ctx: ctx, req: wrap(m.req), keys: m.keys}
	}
	s.runWrites(ctx, ws)
	for i, m := range ms {
		m.err = ws[i].err
	}
}

func admitW(req fencegate.AdmitRequest) *member[*writeCall] {
	return &member[*writeCall]{ctx: context.Background(), req: &writeCall{admit: &admitCall{req: req}}}
}

func settleW(id string, o fencegate.Outcome) *member[*writeCall] {
	return &member[*writeCall]{ctx: context.Background(), req: &writeCall{settle: &settleCall{id: id, o: o}}}
}

func openCounted(t *testing.T, dsn string, lockedOnly bool) (*Store, *commits) {
	t.Helper()
	c := &commits{}
	s, err := open(context.Background(), dsn, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = c })
	if err != nil {
		t.Fatal(err)
	}
	s.lockedOnly = lockedOnly
	t.Cleanup(func() { _ = s.Close() })
	return s, c
}

func committed(v string, now time.Time) fencegate.Outcome {
	return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: v, Now: now}
}

// TestASettleAndAnAdmissionShareOneCommit: concurrent settles and
// admissions on distinct resources go in one transaction: a batch of a
// settle and two admissions (one on a resource already written, one on a new
// one) sends exactly one COMMIT, on the fast path (every member known) and
// on the locked path alike, and each member gets what it would have alone:
// the settle's receipt COMMITTED with its version and its resource's
// pending mark cleared, each admission its receipt and the version its
// target had.
func TestASettleAndAnAdmissionShareOneCommit(t *testing.T) {
	for _, locked := range []bool{false, true} {
		name := "fast"
		if locked {
			name = "locked"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s, c := openCounted(t, testenv.PostgresURL(t), locked)
			now := time.UnixMilli(1_700_000_000_000).UTC()
			for _, res := range []string{"res/s", "res/a"} {
				if _, err := s.Admit(ctx, writeReq(res, 1, res+"-1", now)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Settle(ctx, "res/a-1", committed("v-a1", now)); err != nil {
				t.Fatal(err)
			}
			fast, before := s.fast.Load(), c.n.Load()
			ms := []*member[*writeCall]{
				admitW(writeReq("res/a", 2, "res/a-2", now)),
				settleW("res/s-1", committed("v-s1", now)),
				admitW(writeReq("res/new", 1, "res/new-1", now)),
			}
			s.runWrites(ctx, ms)
			for _, m := range ms {
				if m.err != nil {
					t.Fatalf("member: %v", m.err)
				}
			}
			if n := c.n.Load() - before; n != 1 {
				t.Errorf("the mixed batch sent %d COMMITs, want 1", n)
			}
			if wantFast := !locked; (s.fast.Load() > fast) != wantFast {
				t.Errorf("fast batches %d -> %d; want fast path %v", fast, s.fast.Load(), wantFast)
			}
			if a := ms[0].req.admit; a.adm.Receipt.ID != "res/a-2" || a.adm.PreviousVersion != "v-a1" || !a.decided {
				t.Errorf("admission on res/a: %+v", a.adm)
			}
			if out := ms[1].req.settle.out; out.State != fencegate.ReceiptCommitted || out.Version != "v-s1" {
				t.Errorf("settle of res/s-1: %+v", out)
			}
			if a := ms[2].req.admit; a.adm.Receipt.ID != "res/new-1" || a.adm.PreviousVersion != "" {
				t.Errorf("admission on res/new: %+v", a.adm)
			}
			for res, pending := range map[string]string{"res/s": "", "res/a": "res/a-2", "res/new": "res/new-1"} {
				if row, err := s.Resource(ctx, res); err != nil || row.PendingReceipt != pending {
					t.Errorf("%s: %+v, %v; want pending %q", res, row, err, pending)
				}
			}
			if v, err := s.Version(ctx, "res/s"); err != nil || v != "v-s1" {
				t.Errorf("version of res/s %q (%v), want v-s1", v, err)
			}
		})
	}
}

// TestAMixedBatchIsolatesEachMembersFailure: in one batch of admissions and
// settles, a member the database refuses (an admission reusing a receipt
// ID; a settle whose version holds a NUL byte, which text refuses) rolls the
// transaction back, and the members are run again alone: each refused one
// gets INVALID_REQUEST and changes nothing, a settle of an unknown receipt
// NOT_FOUND, and every other member, of either kind, is done as alone.
func TestAMixedBatchIsolatesEachMembersFailure(t *testing.T) {
	ctx := context.Background()
	s, _ := openCounted(t, testenv.PostgresURL(t), false)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	for _, res := range []string{"res/taken", "res/bad", "res/ok"} {
		if _, err := s.Admit(ctx, writeReq(res, 1, res+"-1", now)); err != nil {
			t.Fatal(err)
		}
	}
	badBefore, _ := s.Receipt(ctx, "res/bad-1")
	ms := []*member[*writeCall]{
		admitW(writeReq("res/a", 1, "res/a-1", now)),
		admitW(writeReq("res/dup", 1, "res/taken-1", now)), // the receipt ID is taken
		settleW("res/bad-1", committed("v\x00", now)),
		settleW("res/none", committed("v", now)),
		settleW("res/ok-1", committed("v-ok", now)),
		admitW(writeReq("res/b", 1, "res/b-1", now)),
	}
	s.runWrites(ctx, ms)
	want := []fencegate.Code{"", fencegate.CodeInvalidRequest, fencegate.CodeInvalidRequest, fencegate.CodeNotFound, "", ""}
	for i, m := range ms {
		got := fencegate.Code("")
		if m.err != nil {
			got = fencegate.ErrorCode(m.err)
		}
		if got != want[i] {
			t.Errorf("member %d: %v, want %q", i, m.err, want[i])
		}
	}
	for _, res := range []string{"res/a", "res/b"} {
		if row, err := s.Resource(ctx, res); err != nil || row.PendingReceipt != res+"-1" {
			t.Errorf("%s: %+v, %v", res, row, err)
		}
	}
	if r, err := s.Receipt(ctx, "res/ok-1"); err != nil || r.State != fencegate.ReceiptCommitted || r.Version != "v-ok" {
		t.Errorf("res/ok-1: %+v, %v", r, err)
	}
	if _, err := s.Resource(ctx, "res/dup"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Errorf("the refused admission left state: %v", err)
	}
	if r, err := s.Receipt(ctx, "res/taken-1"); err != nil || r.Resource != "res/taken" || r.State != fencegate.ReceiptPending {
		t.Errorf("res/taken-1 after a member reused its ID: %+v, %v", r, err)
	}
	if r, err := s.Receipt(ctx, "res/bad-1"); err != nil || r.State != badBefore.State || r.Version != badBefore.Version {
		t.Errorf("res/bad-1 after its refused settle: %+v, %v; was %+v", r, err, badBefore)
	}
	if row, err := s.Resource(ctx, "res/bad"); err != nil || row.PendingReceipt != "res/bad-1" {
		t.Errorf("res/bad after its refused settle: %+v, %v", row, err)
	}
}

// TestASettleAndAnAdmissionOnOneResourceKeepTheirOrder: a settle of a
// receipt this store admitted holds the receipt's resource as a batch key,
// so an admission on that resource queued after it never shares its batch
// and runs in a later one (the settle first), while an admission on another
// resource joins the settle's batch.
func TestASettleAndAnAdmissionOnOneResourceKeepTheirOrder(t *testing.T) {
	ctx := context.Background()
	s, _ := openCounted(t, testenv.PostgresURL(t), false)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := s.Admit(ctx, writeReq("res/x", 1, "res/x-1", now)); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		batches [][]string
	)
	g := group[*writeCall]{slots: 1, run: func(ctx context.Context, ms []*member[*writeCall]) {
		var names []string
		for _, m := range ms {
			if m.req.settle != nil {
				names = append(names, "settle "+m.req.settle.id)
			} else {
				names = append(names, "admit "+m.req.admit.req.ReceiptID)
			}
		}
		mu.Lock()
		batches = append(batches, names)
		mu.Unlock()
		s.runWrites(ctx, ms)
	}}
	var queued []*member[*writeCall]
	add := func(w *member[*writeCall], keys []string) {
		w.keys, w.done = keys, make(chan struct{})
		queued = append(queued, w)
	}
	add(settleW("res/x-1", committed("v-x1", now)), s.settleKeys("res/x-1"))
	for _, req := range []fencegate.AdmitRequest{writeReq("res/x", 2, "res/x-2", now), writeReq("res/y", 1, "res/y-1", now)} {
		keys, err := s.admitKeys(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		add(admitW(req), keys)
	}
	g.mu.Lock()
	g.queue = append(g.queue, queued...)
	g.kick()
	g.mu.Unlock()
	for _, m := range queued {
		<-m.done
		if m.err != nil {
			t.Fatalf("member: %v", m.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 2 || !slices.Equal(batches[0], []string{"settle res/x-1", "admit res/y-1"}) ||
		!slices.Equal(batches[1], []string{"admit res/x-2"}) {
		t.Fatalf("batches %q; want the settle with res/y's admission, then res/x's", batches)
	}
	if row, err := s.Resource(ctx, "res/x"); err != nil || row.PendingReceipt != "res/x-2" || row.LastSegmentSeq != 2 {
		t.Errorf("res/x: %+v, %v", row, err)
	}
}

// TestABatchDecidesMembersOnOneResourceInItsOrder: a settle of a receipt
// this store does not know (another replica admitted it) holds no resource
// key, so it may share a batch with an admission on its resource; the
// locked path then decides them in batch order, as one after the other: the
// settle first frees the resource and the next segment is accepted; the
// admission first finds the resource busy (RESOURCE_BUSY, nothing written
// for it) and the settle after it still goes through.
func TestABatchDecidesMembersOnOneResourceInItsOrder(t *testing.T) {
	for _, settleFirst := range []bool{true, false} {
		name := "settle first"
		if !settleFirst {
			name = "admission first"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dsn := testenv.PostgresURL(t)
			other, _ := openCounted(t, dsn, false)
			s, _ := openCounted(t, dsn, false)
			now := time.UnixMilli(1_700_000_000_000).UTC()
			if _, err := other.Admit(ctx, writeReq("res/x", 1, "res/x-1", now)); err != nil {
				t.Fatal(err)
			}
			if keys := s.settleKeys("res/x-1"); len(keys) != 1 {
				t.Fatalf("keys of a settle of an unknown receipt %q, want its ID alone", keys)
			}
			set, adm := settleW("res/x-1", committed("v-x1", now)), admitW(writeReq("res/x", 2, "res/x-2", now))
			ms := []*member[*writeCall]{set, adm}
			if !settleFirst {
				ms = []*member[*writeCall]{adm, set}
			}
			s.runWrites(ctx, ms)
			if set.err != nil || set.req.settle.out.State != fencegate.ReceiptCommitted {
				t.Errorf("settle: %+v, %v", set.req.settle.out, set.err)
			}
			row, err := s.Resource(ctx, "res/x")
			if err != nil {
				t.Fatal(err)
			}
			if settleFirst {
				if adm.err != nil || adm.req.admit.adm.PreviousVersion != "v-x1" || row.PendingReceipt != "res/x-2" || row.LastSegmentSeq != 2 {
					t.Errorf("admission after the settle: %+v, %v; res/x %+v", adm.req.admit.adm, adm.err, row)
				}
				return
			}
			if fencegate.ErrorCode(adm.err) != fencegate.CodeResourceBusy {
				t.Errorf("admission before the settle: %v, want RESOURCE_BUSY", adm.err)
			}
			if row.PendingReceipt != "" || row.LastSegmentSeq != 1 {
				t.Errorf("res/x after a refused admission and the settle: %+v", row)
			}
			if _, err := s.Receipt(ctx, "res/x-2"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
				t.Errorf("the refused admission left a receipt: %v", err)
			}
		})
	}
}

// TestTwoMembersOnOneResourceSkipTheFastPath: two admissions of one
// resource in one batch (batch keys normally keep them apart) are each
// acceptable on the known state, but each fast statement compares its row
// with that one state, so planFast refuses the batch and the locked path
// decides them one after the other: the first is accepted, the second is
// refused and leaves no receipt.
func TestTwoMembersOnOneResourceSkipTheFastPath(t *testing.T) {
	ctx := context.Background()
	s, _ := openCounted(t, testenv.PostgresURL(t), false)
	now := time.UnixMilli(1_700_000_000_000).UTC()
	if _, err := s.Admit(ctx, writeReq("res/x", 1, "res/x-1", now)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Settle(ctx, "res/x-1", committed("v-x1", now)); err != nil {
		t.Fatal(err)
	}
	a, b := admitW(writeReq("res/x", 2, "res/x-2a", now)), admitW(writeReq("res/x", 2, "res/x-2b", now))
	fast, missed := s.fast.Load(), s.missed.Load()
	s.runWrites(ctx, []*member[*writeCall]{a, b})
	if s.fast.Load() != fast || s.missed.Load() != missed {
		t.Errorf("fast %d -> %d, missed %d -> %d; want the batch locked from the start", fast, s.fast.Load(), missed, s.missed.Load())
	}
	if a.err != nil || a.req.admit.adm.Receipt.ID != "res/x-2a" {
		t.Errorf("first admission: %+v, %v", a.req.admit.adm, a.err)
	}
	if b.err == nil {
		t.Errorf("second admission of segment 2 accepted: %+v", b.req.admit.adm)
	}
	if _, err := s.Receipt(ctx, "res/x-2b"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Errorf("the refused admission left a receipt: %v", err)
	}
}
