package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// staleListStore answers ReceiptsByState from a snapshot taken earlier (a
// reconciler pass that listed before another replica's pass moved on).
type staleListStore struct {
	fencegate.FenceStore
	snap map[fencegate.ReceiptState]fencegate.ReceiptPage
}

func (s *staleListStore) ReceiptsByState(ctx context.Context, state fencegate.ReceiptState, p fencegate.Page) (fencegate.ReceiptPage, error) {
	if pg, ok := s.snap[state]; ok {
		return pg, nil
	}
	return s.FenceStore.ReceiptsByState(ctx, state, p)
}

// TestStaleOrphanClaimLeavesAnotherReplicasAnswer: replica A's pass listed
// the orphan PENDING; replica B's pass claimed and resent it first, and the
// upstream answered 500 (unknown, not to be resent): UNKNOWN with Resend
// false. A's claim, made from its stale PENDING copy, is refused (it is
// conditional on the receipt as read), so A does not resend a request
// whose answer forbade it.
func TestStaleOrphanClaimLeavesAnotherReplicasAnswer(t *testing.T) {
	kit := prooftest.New(t)
	st := openEmbedded(t)
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":"internal"}`))
	}))
	defer srv.Close()
	c := payoutsConfig(t, srv.URL, 30*time.Second)
	api, _ := httpapi.New(c, &http.Client{}, httpapi.WithClock(kit.Now))
	_, vg := payoutGrant(kit)
	const id = "rcpt_orphan"
	ctx := context.Background()
	admitOrphan(t, st, api, vg, id, kit.Now())
	kit.Advance(3 * time.Minute)
	// A lists now.
	snap := map[fencegate.ReceiptState]fencegate.ReceiptPage{}
	for _, s := range []fencegate.ReceiptState{fencegate.ReceiptPending, fencegate.ReceiptUnknown} {
		pg, err := st.ReceiptsByState(ctx, s, fencegate.Page{Limit: fencegate.MaxPageLimit})
		if err != nil {
			t.Fatal(err)
		}
		snap[s] = pg
	}
	// B's pass runs first.
	rcB := &gateway.Reconciler{Store: st, Now: kit.Now, Orphan: 2 * time.Minute, Resolver: httpapi.Resolvers{"payouts": api}.For}
	if _, err := rcB.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	afterB, _ := st.Receipt(ctx, id)
	if afterB.State != fencegate.ReceiptUnknown || afterB.Resend || posts != 1 {
		t.Fatalf("after B: %s resend=%v %q, %d posts; want UNKNOWN, no resend allowed, 1 post", afterB.State, afterB.Resend, afterB.Error, posts)
	}
	// A's pass, from its stale list.
	rcA := &gateway.Reconciler{Store: &staleListStore{FenceStore: st, snap: snap}, Now: kit.Now, Orphan: 2 * time.Minute,
		Resolver: httpapi.Resolvers{"payouts": api}.For}
	if _, err := rcA.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if posts != 1 {
		r, _ := st.Receipt(ctx, id)
		t.Fatalf("A resent a receipt whose last answer forbids a resend (B recorded Resend=false, %q): %d posts; now %s resend=%v attempts=%d",
			afterB.Error, posts, r.State, r.Resend, r.Attempts)
	}
}
