package authority_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
)

// Rule: the bundles a registry published are kept with their signatures
// across a restart (the signature file), the last authority.ChainLength of
// them: the chain after a version answers each published since, oldest
// first, and a replica two changes behind follows it to the bundle in
// force (each step verified under the one before); a version older than
// kept is NOT_FOUND.
func TestThePublishedChainSurvivesARestartAndIsFollowed(t *testing.T) {
	w := newChainWorld(t, false)
	_, _, v3, sig3 := missedTwoChanges(t, w)
	w.registry = w.reg.open()
	chain, err := w.registry.TrustBundleChain(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var versions []uint64
	for _, l := range chain.Bundles {
		versions = append(versions, l.Version)
	}
	if !slices.Equal(versions, []uint64{2, 3}) || chain.Bundles[1].Bundle != string(v3) || chain.Bundles[1].Signature != string(sig3) {
		t.Fatalf("chain after 1: versions %v", versions)
	}
	fetch := func(_ context.Context, after uint64) ([]fencegate.BundleLink, error) {
		c, err := w.registry.TrustBundleChain(ctx, after)
		return c.Bundles, err
	}
	ok, _, err := w.replica.FollowBundle(ctx, v3, string(sig3), fetch)
	if b := w.replica.Verifier().Bundle(); !ok || err != nil || b.Version() != 3 || !slices.Equal(b.KeyIDs(), []string{"registry-2"}) {
		t.Fatalf("followed: %v %v, version %d keys %v", ok, err, b.Version(), b.KeyIDs())
	}
	for range authority.ChainLength {
		if _, err := w.registry.RotateKey(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var kept []json.RawMessage
	if err := json.Unmarshal(w.reg.read("trust-bundle.json.sig"), &kept); err != nil || len(kept) != authority.ChainLength {
		t.Fatalf("the signature file keeps %d bundles (%v), want %d", len(kept), err, authority.ChainLength)
	}
	if c, err := w.registry.TrustBundleChain(ctx, 3); err != nil || len(c.Bundles) != authority.ChainLength {
		t.Fatalf("the chain after the oldest kept's predecessor: %d bundles, %v", len(c.Bundles), err)
	}
	_, err = w.registry.TrustBundleChain(ctx, 2)
	wantCode(t, err, fencegate.CodeNotFound)
}
