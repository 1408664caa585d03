package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// vanishingQuerier answers like an in-process registry whose backend lost
// the lease: NOT_FOUND becomes STATUS_INVALID; it counts the questions.
type vanishingQuerier struct {
	n    int
	gone bool
}

func (q *vanishingQuerier) GrantStatus(ctx context.Context, g fencegate.VerifiedGrant) (fencegate.Status, error) {
	q.n++
	if q.gone {
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeStatusInvalid, "grant names an unknown lease")
	}
	return (&countingQuerier{}).GrantStatus(ctx, g)
}

func TestFreshProofOfAVanishedLeaseIsRefusedOnTheFirstSegmentWithoutStateChange(t *testing.T) {
	f := newFixture(t)
	q := &vanishingQuerier{}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Confirm: q, Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := gw.Apply(ctx, f.request(5, 1, "v1")); err != nil || q.n != 1 {
		t.Fatalf("first segment of a held lease: %v, %d questions", err, q.n)
	}
	if _, err := gw.Apply(ctx, f.request(5, 2, "v2")); err != nil || q.n != 1 {
		t.Fatalf("later segments rely on the proof: %v, %d questions", err, q.n)
	}
	before, _ := f.store.Resource(ctx, resource)
	q.gone = true // the coordination state is lost: fence 6's lease no longer exists
	_, err = gw.Apply(ctx, f.request(6, 1, "stale"))
	if fencegate.ErrorCode(err) != fencegate.CodeStatusInvalid {
		t.Fatalf("vanished lease with a fresh proof: want STATUS_INVALID, got %v", err)
	}
	if after, _ := f.store.Resource(ctx, resource); after != before || f.content() != "v2" {
		t.Fatalf("the refusal changed state: %+v -> %+v, object %q", before, after, f.content())
	}
	if err := gw.Precheck(ctx, f.request(6, 1, "stale")); err != nil || q.n != 2 {
		t.Fatalf("precheck leaves the question to admission: %v, %d questions", err, q.n)
	}
}

// stuckQuerier is a registry whose backend does not answer: it waits for
// its context.
type stuckQuerier struct{}

func (stuckQuerier) GrantStatus(ctx context.Context, _ fencegate.VerifiedGrant) (fencegate.Status, error) {
	<-ctx.Done()
	return fencegate.Status{}, ctx.Err()
}

// Rule: a registry query is bounded (queryTimeout): one the registry does
// not answer is BACKEND_UNAVAILABLE, not a verdict on the grant, and the
// write changes nothing; it used to wait, holding the resource's lock, for
// as long as the caller did.
func TestARegistryQueryThatIsNotAnsweredIsBackendUnavailable(t *testing.T) {
	defer gateway.SetQueryTimeout(10 * time.Millisecond)()
	f := newFixture(t)
	for name, cfg := range map[string]gateway.Config{"query mode": {Querier: stuckQuerier{}}, "first-write confirmation": {Confirm: stuckQuerier{}}} {
		cfg.Verifier, cfg.Store, cfg.Now, cfg.Policy = f.kit.Verifier(), f.store, f.kit.Now, gateway.StaticPolicy{Generation: 1}
		gw, err := gateway.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req := f.request(5, 1, "v1")
		if cfg.Querier != nil {
			req.StatusToken = ""
		}
		before, _ := f.store.Resource(context.Background(), req.Resource)
		if _, err := gw.Apply(context.Background(), req); fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
			t.Fatalf("%s, the registry not answering: %v; want BACKEND_UNAVAILABLE", name, err)
		}
		if after, _ := f.store.Resource(context.Background(), req.Resource); after != before {
			t.Fatalf("%s: the refused write changed the resource: %+v -> %+v", name, before, after)
		}
	}
}

// lateVerdictQuerier gives its verdict once its context has run out (a
// refresh of the replica's bundle took the query's time).
type lateVerdictQuerier struct{}

func (lateVerdictQuerier) GrantStatus(ctx context.Context, _ fencegate.VerifiedGrant) (fencegate.Status, error) {
	<-ctx.Done()
	return fencegate.Status{}, fencegate.Errorf(fencegate.CodeStatusInvalid, "the registry's statement does not verify")
}

// Rule: a verdict the registry gave stands though the query's time ran out
// meanwhile; only a query without an answer is BACKEND_UNAVAILABLE.
func TestAVerdictGivenAsTheQueryTimedOutStands(t *testing.T) {
	defer gateway.SetQueryTimeout(10 * time.Millisecond)()
	f := newFixture(t)
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Querier: lateVerdictQuerier{}})
	if err != nil {
		t.Fatal(err)
	}
	req := f.request(5, 1, "v1")
	req.StatusToken = ""
	before, content := f.storedState(), f.content()
	if _, err := gw.Apply(context.Background(), req); fencegate.ErrorCode(err) != fencegate.CodeStatusInvalid {
		t.Fatalf("a verdict given as the query timed out: %v; want STATUS_INVALID", err)
	}
	if got := f.storedState(); got != before || f.content() != content {
		t.Fatalf("the refused write changed state:\n%s\n%s", before, got)
	}
}
