package authority_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// fetchChain is the ChainFetcher of w's registry (GET /v1/trust-bundle/chain
// answered in process).
func (w *chainWorld) fetchChain(_ context.Context, after uint64) ([]fencegate.BundleLink, error) {
	c, err := w.registry.TrustBundleChain(ctx, after)
	return c.Bundles, err
}

// revokedOne has w's registry retire epoch 1 (rotating to epoch 2 in the
// same version) and the replica follow it: the replica then holds the key
// registry-2 and has epoch 1 revoked.
func revokedOne(t *testing.T, w *chainWorld) {
	t.Helper()
	if _, err := w.registry.RetireEpoch(ctx, 1); err != nil {
		t.Fatal(err)
	}
	data, sig := w.served()
	if ok, _, err := w.replica.FollowBundle(ctx, data, sig, w.fetchChain); !ok || err != nil || !w.replica.EpochRevoked(1) {
		t.Fatalf("the replica follows the retirement of epoch 1: %v %v", ok, err)
	}
}

// Rule: each fetched bundle refused is counted once
// (fencegate_trust_bundle_refusals_total{source="registry"}), whatever
// refused it: a document that does not parse, a bundle the authority does
// not admit (a key of an epoch revoked here), one the verifier refuses at
// install (signed along the chain, but dropping a revocation), and one off
// the chain the registry keeps no chain for (its answer NOT_FOUND). Each
// leaves the bundle in force and its file as they were.
func TestEachRefusalOfAFetchedBundleIsCountedOnce(t *testing.T) {
	for name, c := range map[string]func(t *testing.T, w *chainWorld) ([]byte, string, authority.ChainFetcher){
		"does not parse": func(t *testing.T, w *chainWorld) ([]byte, string, authority.ChainFetcher) {
			return []byte(`{"version":9}`), "", nil
		},
		"not admitted": func(t *testing.T, w *chainWorld) ([]byte, string, authority.ChainFetcher) {
			revokedOne(t, w)
			doc, sig, _ := prooftest.Impostor(t, "registry-1", 1, 9, proofs.Revocations{})
			return doc, sig, w.fetchChain
		},
		"refused by the verifier at install": func(t *testing.T, w *chainWorld) ([]byte, string, authority.ChainFetcher) {
			revokedOne(t, w)
			dropping, err := proofs.NewBundle(9, w.registry.Verifier().Bundle().Keys()...)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := dropping.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			sig, err := proofs.SignBundle(doc, 9, w.registry.Signer())
			if err != nil {
				t.Fatal(err)
			}
			return doc, sig, w.fetchChain
		},
		"off the chain, none kept from here": func(t *testing.T, w *chainWorld) ([]byte, string, authority.ChainFetcher) {
			_, _, v3, sig3 := missedTwoChanges(t, w)
			return v3, string(sig3), func(context.Context, uint64) ([]fencegate.BundleLink, error) {
				return nil, fencegate.Errorf(fencegate.CodeNotFound, "trust bundle chain: no unbroken chain is kept here")
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			w := newChainWorld(t, false)
			data, sig, fetch := c(t, w)
			version, file := w.replica.Verifier().Bundle().Version(), w.rep.read("trust-bundle.json")
			w.rep.alarm.refusals = nil
			ok, _, err := w.replica.FollowBundle(ctx, data, sig, fetch)
			if ok || fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
				t.Fatalf("installed %v, %v; want refused (INVALID_REQUEST)", ok, err)
			}
			if v := w.replica.Verifier().Bundle().Version(); v != version || !bytes.Equal(w.rep.read("trust-bundle.json"), file) {
				t.Fatalf("refused, yet the replica is at version %d (was %d) or its file changed", v, version)
			}
			w.rep.alarm.wantRefusals(t, "registry")
		})
	}
}

// Rule: a chain that cannot be fetched (BACKEND_UNAVAILABLE: the registry
// unreachable) is not counted as a refusal and answers BACKEND_UNAVAILABLE,
// not INVALID_REQUEST (the puller backs off from either: internal/app's
// refusedFetch), but the fetched bundle's revocations
// apply here all the same (persisted; the bundle and its file as they
// were), so no outage of the chain route keeps a revoked epoch trusted.
// The price: once the chain answers, its step signed by a key of that
// epoch is refused (counted), and the replica is left for its operator.
// Any other error is the registry's answer and a refusal
// (TestEachRefusalOfAFetchedBundleIsCountedOnce).
func TestAChainThatCannotBeFetchedIsNotCountedButItsRevocationsApply(t *testing.T) {
	w := newChainWorld(t, false)
	_, _, v3, sig3 := missedTwoChanges(t, w)
	bundleFile, stateFile := w.rep.read("trust-bundle.json"), w.rep.read("authority.json")
	ok, _, err := w.replica.FollowBundle(ctx, v3, string(sig3), func(context.Context, uint64) ([]fencegate.BundleLink, error) {
		return nil, fencegate.Errorf(fencegate.CodeBackendUnavailable, "the registry could not be asked for its chain")
	})
	if ok || fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || !strings.Contains(err.Error(), "could not be fetched") {
		t.Fatalf("installed %v, %v; want BACKEND_UNAVAILABLE naming the chain not fetched", ok, err)
	}
	if w.replica.Verifier().Bundle().Version() != 1 || !w.replica.EpochRevoked(1) || !bytes.Equal(w.rep.read("trust-bundle.json"), bundleFile) {
		t.Fatalf("the chain not fetched: version %d, epoch 1 revoked %v, bundle file changed %v; want version 1, epoch 1 revoked here, the file as it was",
			w.replica.Verifier().Bundle().Version(), w.replica.EpochRevoked(1), !bytes.Equal(w.rep.read("trust-bundle.json"), bundleFile))
	}
	if bytes.Equal(w.rep.read("authority.json"), stateFile) {
		t.Fatal("the revocation applied here was not persisted in the state file")
	}
	w.rep.alarm.wantRefusals(t)
	// Once the chain answers, its first step is signed by a key of the epoch
	// revoked here: refused (counted), left for an operator.
	if ok, _, err := w.replica.FollowBundle(ctx, v3, string(sig3), w.fetchChain); ok || fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest || w.replica.Verifier().Bundle().Version() != 1 {
		t.Fatalf("once the chain is fetched: installed %v, %v, version %d; want refused, version 1", ok, err, w.replica.Verifier().Bundle().Version())
	}
	w.rep.alarm.wantRefusals(t, "registry")
}
