package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/fencestore/memory"
	"github.com/fencegate/fencegate/gateway"
)

// Rule: UNKNOWN receipts that wait for a person (no resolver settles them)
// do not keep newer ones from the reconciler once there are more of them
// than a pass looks at: passes read the list in turns, and a newer write
// whose object never landed is settled NOT_APPLIED.
// unknownWrites admits and settles UNKNOWN one object write per call, a
// second apart, in a memory store; now is the clock after the last.
type unknownWrites struct {
	t   *testing.T
	st  *memory.Store
	now time.Time
}

func (u *unknownWrites) add(i int, store string) string {
	u.t.Helper()
	ctx := context.Background()
	g := fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: fmt.Sprintf("%s/r%d", store, i), Owner: "o", Lease: "l",
		FenceToken: 1, OperationID: "op", OperationRoot: "root", IssuedAt: u.now.UnixMilli()}, Digest: "sha256:g"}
	id := fmt.Sprintf("rcpt_%02d", i)
	if _, err := u.st.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: 1, Target: fencegate.ObjectTarget(store, fmt.Sprintf("r%d", i)),
		Method: "PUT", PayloadDigest: "sha256:p", ReceiptID: id, Now: u.now, EffectTimeout: time.Minute}); err != nil {
		u.t.Fatal(err)
	}
	if _, err := u.st.Settle(ctx, id, fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: "no answer", Now: u.now}); err != nil {
		u.t.Fatal(err)
	}
	u.now = u.now.Add(time.Second)
	return id
}

func TestReceiptsBehindAPassLimitOfStuckOnesAreReconciledInTurn(t *testing.T) {
	defer gateway.SetPassLimit(5)()
	ctx := context.Background()
	st := memory.New()
	objs, err := local.New("local", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	u := &unknownWrites{t: t, st: st, now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	admit := u.add
	for i := range 12 { // a store no resolver serves: they wait for a person
		admit(i, "gone")
	}
	newer := admit(12, "local")
	clock := u.now.Add(10 * time.Minute)
	rc := &gateway.Reconciler{Store: st, Now: func() time.Time { return clock }, Orphan: 2 * time.Minute, Resolver: func(target string) gateway.Resolver {
		if _, _, ok := fencegate.SplitObjectTarget(target); ok && target[:len("objects/local/")] == "objects/local/" {
			return gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"local": objs}, Now: func() time.Time { return clock },
				EffectTimeout: time.Minute, Grace: 2 * time.Minute}
		}
		return nil
	}}
	for pass := 0; pass < 4; pass++ {
		if _, err := rc.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := st.Receipt(ctx, newer); err != nil || r.State != fencegate.ReceiptNotApplied {
		t.Fatalf("the newer UNKNOWN write behind 12 stuck ones (a pass looks at 5): %s %v, want NOT_APPLIED", r.State, err)
	}
}

// Rule: a receipt's retry delay outlives the passes that read other turns
// of a long list: with the clock standing still, each receipt whose effect
// query failed is asked once, not again every time its turn comes round.
func TestARetryDelayOutlivesTheOtherTurnsOfTheList(t *testing.T) {
	defer gateway.SetPassLimit(2)()
	ctx := context.Background()
	st := memory.New()
	u := &unknownWrites{t: t, st: st, now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	for i := range 4 {
		u.add(i, "local")
	}
	clock := u.now.Add(10 * time.Minute)
	asked := map[string]int{}
	rc := &gateway.Reconciler{Store: st, Now: func() time.Time { return clock }, Orphan: 2 * time.Minute,
		Resolver: unreachable(func(r fencegate.Receipt) { asked[r.ID]++ })}
	for pass := 0; pass < 4; pass++ {
		if _, err := rc.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for id, n := range asked {
		if n != 1 {
			t.Fatalf("receipt %s asked %d times in 4 passes with the clock standing still (%v), want once", id, n, asked)
		}
	}
	if len(asked) != 4 {
		t.Fatalf("receipts asked: %v, want all 4 once", asked)
	}
}

// Rule: a pass that read a turn of a long UNKNOWN list still reports the
// backlog and the overdue alarm of the list's head (what Overdue answers),
// not of its turn, so the alarm does not come and go with the turns.
func TestTheOverdueAlarmIsOfTheHeadWhateverTurnAPassRead(t *testing.T) {
	defer gateway.SetPassLimit(2)()
	ctx := context.Background()
	st := memory.New()
	u := &unknownWrites{t: t, st: st, now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	for i := range 4 {
		u.add(i, "local")
	}
	clock := u.now.Add(time.Hour)
	var reported []string
	rc := &gateway.Reconciler{Store: st, Now: func() time.Time { return clock }, Orphan: 2 * time.Minute, Deadline: 15 * time.Minute,
		Resolver: unreachable(func(fencegate.Receipt) {}),
		OnOverdue: func(rs []fencegate.Receipt) {
			var ids []string
			for _, r := range rs {
				ids = append(ids, r.ID)
			}
			reported = append(reported, fmt.Sprint(ids))
		}}
	for pass := 0; pass < 3; pass++ {
		if _, err := rc.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for i, got := range reported {
		if got != "[rcpt_00 rcpt_01]" {
			t.Fatalf("pass %d reported overdue %s, want the head's [rcpt_00 rcpt_01] (all passes: %v)", i, got, reported)
		}
	}
}

// unreachable resolves nothing: every effect query fails, after asked.
func unreachable(asked func(fencegate.Receipt)) func(string) gateway.Resolver {
	return func(string) gateway.Resolver {
		return gateway.ResolverFunc(func(_ context.Context, r fencegate.Receipt) (fencegate.Outcome, error) {
			asked(r)
			return fencegate.Outcome{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "the store cannot be asked")
		})
	}
}
