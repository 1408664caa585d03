package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// TestOrphanPassWaitsForTheLandByOfAnAPICallInFlight: replica A (effect
// timeout 10 min) sends an API call whose receipt keeps that LandBy;
// replica B (effect timeout 1 min, orphan 2 min: valid on its own, as in a
// rolling restart) runs its reconciler 3 min after admission, while A's
// send is still open. B does not take the receipt for an orphan before its
// LandBy: no second request under the same key is sent beside the first
// (the API's contract does not promise to serialise them).
func TestOrphanPassWaitsForTheLandByOfAnAPICallInFlight(t *testing.T) {
	kit := prooftest.New(t)
	st := openEmbedded(t)
	srv := newSlowUpstream(t)
	c := payoutsConfig(t, srv.URL, 9*time.Minute)
	api, err := httpapi.New(c, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, httpapi.WithClock(kit.Now))
	if err != nil {
		t.Fatal(err)
	}
	gwA, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: st, Now: kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, EffectTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tok, vg := payoutGrant(kit)
	done := make(chan error, 1)
	go func() {
		_, err := gwA.Apply(context.Background(), payoutRequest(kit, tok, vg, payoutCall(api, nil, nil)))
		done <- err
	}()
	<-srv.first
	kit.Advance(3 * time.Minute)
	apiB, _ := httpapi.New(c, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, httpapi.WithClock(kit.Now),
		httpapi.WithEffectTimeout(time.Minute))
	rcB := &gateway.Reconciler{Store: st, Now: kit.Now, Orphan: 2 * time.Minute, Resolver: httpapi.Resolvers{"payouts": apiB}.For}
	_, _ = rcB.RunOnce(context.Background())
	close(srv.release)
	<-done
	if posts, maxOpen := srv.counts(); maxOpen > 1 {
		t.Fatalf("replica B resent the call under the same key while A's send (LandBy +10 min) was still open: %d requests, %d at once", posts, maxOpen)
	}
}
