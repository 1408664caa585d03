package authority

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
)

// Rule: a replica whose bundle file holds its own upload F of version v (its
// directory sync failed after the rename) refuses the registry's bundle R
// of version v (INTERNAL, the file and the version in force unchanged) but
// applies the epochs R revokes, as for every fetched bundle refused
// (narrow.go): a replica must not keep trusting an epoch its registry
// revoked. That refusal applied none of them.
func TestARegistryBundleRefusedForTheFilesOwnOfItsVersionStillRevokesHere(t *testing.T) {
	ctx := context.Background()
	reg, _ := openSigning(t)
	if _, err := reg.RotateKey(ctx); err != nil { // keys of epochs 1 and 2
		t.Fatal(err)
	}
	a, cfg := openReplicaOf(t, reg)
	cur := a.Verifier().Bundle()
	if _, err := reg.RetireEpoch(ctx, 1); err != nil { // R: version cur+1, revoking 1
		t.Fatal(err)
	}
	fetched, sig, err := reg.SignedTrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	up := revokingDoc(t, cur, cur.Version()+1, 9) // F: the same version, revoking 9 only
	landAtReplica(t, a, cfg, up)
	ok, _, err := a.OfferBundle(fetched, sig)
	if ok || fencegate.ErrorCode(err) != fencegate.CodeInternal {
		t.Fatalf("the registry's bundle of the landed upload's version: installed %v, %v; want INTERNAL", ok, err)
	}
	if !a.EpochRevoked(1) {
		t.Fatal("the refused registry bundle's revocation of epoch 1 is not applied here")
	}
	if p, err := loadPersisted(cfg.Files.State); err != nil || !slices.Contains(p.RevokedEpochs, 1) {
		t.Fatalf("the state file does not record the revocation of epoch 1: %v %v", p.RevokedEpochs, err)
	}
	if v := a.Verifier().Bundle().Version(); v != cur.Version() || a.EpochRevoked(9) {
		t.Fatalf("after the refusal: version %d in force, epoch 9 revoked %v", v, a.EpochRevoked(9))
	}
	if now, _ := os.ReadFile(cfg.Files.Bundle); !bytes.Equal(now, up) {
		t.Fatal("after the refusal: the bundle file changed")
	}
}

// Rule: a fetched bundle of the version in force here with other content
// (this replica's own upload of that version) is logged as a warning, once:
// the replica keeps a bundle its registry did not publish until a higher
// version, and said nothing.
func TestARegistryBundleOfTheVersionInForceWithOtherContentIsWarnedOfOnce(t *testing.T) {
	ctx := context.Background()
	reg, _ := openSigning(t)
	a, _ := openReplicaOf(t, reg)
	cur := a.Verifier().Bundle()
	if _, err := reg.SetTrustBundle(ctx, revokingDoc(t, cur, cur.Version()+1, 8)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetTrustBundle(ctx, revokingDoc(t, cur, cur.Version()+1, 9)); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	a.log = slog.New(slog.NewTextHandler(&logged, nil))
	fetched, sig, err := reg.SignedTrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ok, _, err := a.OfferBundle(fetched, sig); ok || err != nil {
			t.Fatalf("the registry's bundle of the version in force: installed %v, %v", ok, err)
		}
	}
	if n := strings.Count(logged.String(), "level=WARN"); n != 1 || !strings.Contains(logged.String(), "other content") {
		t.Fatalf("%d warnings, want 1: %s", n, logged.String())
	}
	inForce, _ := a.TrustBundle(ctx)
	if ok, _, err := a.OfferBundle(inForce, ""); ok || err != nil || strings.Count(logged.String(), "level=WARN") != 1 {
		t.Fatalf("the bundle in force fetched: installed %v, %v, or warned of", ok, err)
	}
}

// Rule: a replica holding in force its own bundle of the version the
// registry's has (an operator's upload there) does not take the registry's,
// but applies what it revokes, as at any refusal of a fetched bundle
// (narrow.go): it used to keep trusting an epoch its registry retired
// until the registry published a higher version.
func TestARegistryBundleOfTheVersionInForceWithOtherContentRevokesHere(t *testing.T) {
	ctx := context.Background()
	reg, _ := openSigning(t)
	a, cfg := openReplicaOf(t, reg)
	cur := a.Verifier().Bundle()
	if _, err := reg.RotateKey(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	fetched, sig, err := reg.SignedTrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	own := revokingDoc(t, cur, cur.Version()+2, 9) // the registry's version, revoking 9 only
	if _, err := a.SetTrustBundle(ctx, own); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := a.OfferBundle(fetched, sig); ok || err != nil {
		t.Fatalf("the registry's bundle of the version in force: installed %v, %v", ok, err)
	}
	if !a.EpochRevoked(1) {
		t.Fatal("epoch 1, retired at the registry, is still trusted here")
	}
	if p, err := loadPersisted(cfg.Files.State); err != nil || !slices.Contains(p.RevokedEpochs, 1) {
		t.Fatalf("the revocation is not in the state file: %v", err)
	}
	if now, _ := os.ReadFile(cfg.Files.Bundle); !bytes.Equal(now, own) || a.Verifier().Bundle().Version() != cur.Version()+2 {
		t.Fatal("the bundle file or the bundle in force changed")
	}
}

// countingAlarm counts the refusals told to it.
type countingAlarm struct {
	noAlarm
	refused int
}

func (c *countingAlarm) BundleRefused(string) { c.refused++ }

// Rule: a chain link the replica admits but cannot keep (here: its bundle
// file holds its own upload of the link's version) stops the walk as a
// refusal, INVALID_REQUEST and counted, so the puller backs off, and the
// fetched bundle's revocations apply, as at every fetched bundle not
// installed. It is no passing failure: the next walk meets the same link
// first, whatever the registry publishes next, and is refused again.
func TestAChainLinkNotKeptHereIsARefusalAndTheFetchedBundleStillRevokes(t *testing.T) {
	ctx := context.Background()
	reg, _ := openSigning(t)
	a, cfg := openReplicaOf(t, reg)
	alarm := &countingAlarm{}
	a.alarm = alarm
	cur := a.Verifier().Bundle()
	if _, err := reg.RotateKey(ctx); err != nil { // cur+1, signed by registry-1
		t.Fatal(err)
	}
	if _, err := reg.RetireEpoch(ctx, 1); err != nil { // cur+2, signed by registry-2 only: off the chain here
		t.Fatal(err)
	}
	fetched, sig, err := reg.SignedTrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	up := revokingDoc(t, cur, cur.Version()+1, 9) // the first link's version, other content
	landAtReplica(t, a, cfg, up)
	chain := func(ctx context.Context, after uint64) ([]fencegate.BundleLink, error) {
		c, err := reg.TrustBundleChain(ctx, after)
		return c.Bundles, err
	}
	for pull := 1; pull <= 2; pull++ {
		ok, _, err := a.FollowBundle(ctx, fetched, sig, chain)
		if ok || fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
			t.Fatalf("pull %d: a chain whose first link is not kept here: installed %v, %v; want INVALID_REQUEST", pull, ok, err)
		}
		if alarm.refused != pull {
			t.Fatalf("pull %d: %d refusals counted, want %d", pull, alarm.refused, pull)
		}
		if !a.EpochRevoked(1) {
			t.Fatalf("pull %d: the fetched bundle's revocation of epoch 1 is not applied here", pull)
		}
		if now, _ := os.ReadFile(cfg.Files.Bundle); !bytes.Equal(now, up) || a.Verifier().Bundle().Version() != cur.Version() {
			t.Fatalf("pull %d: the bundle file or the bundle in force changed", pull)
		}
	}
}
