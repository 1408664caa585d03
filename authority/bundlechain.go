package authority

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// The chain route (README, Trust bundle chain): a signing authority keeps
// the last ChainLength bundles it published, each with its signatures and
// the version in force before it, in the signature file (written before
// the bundle file, atomically, as each signature is). A replica whose
// bundle has no key in common with the registry's (it missed more than one
// change) fetches the bundles published after its version and installs
// them one by one through the offer path: each verified under the bundle
// the step before installed, never under itself; the walk stops at the
// first step refused, keeping what it installed, and the registry's bundle
// then narrows trust (narrow.go) for the rest.

// ChainFetcher fetches the bundles the registry published after version
// after, oldest first (GET /v1/trust-bundle/chain?after=after). An error
// coded BACKEND_UNAVAILABLE is a fetch that failed (the registry
// unreachable: a transport failure, a 5xx, an answer not received intact)
// and says nothing about the bundles; any other is the registry's answer
// (NOT_FOUND: it keeps no chain from after).
type ChainFetcher func(ctx context.Context, after uint64) ([]fencegate.BundleLink, error)

// maxChainLinks caps how many links a replica walks from one answer.
const maxChainLinks = 4 * ChainLength

// TrustBundleChain answers the bundles this signing authority published
// after version after, oldest first, ending with the one in force, each
// with the exact document served and its signature: an unbroken chain
// (each published over the one before it, the first over after), or
// NOT_FOUND when it keeps none from after (more than ChainLength bundles
// were published since, or after is not a version it published). Nothing newer than
// after: an empty chain. Without a signing key: NOT_FOUND.
func (a *Authority) TrustBundleChain(_ context.Context, after uint64) (fencegate.BundleChain, error) {
	a.change.Lock()
	defer a.change.Unlock()
	out := fencegate.BundleChain{After: after, Bundles: []fencegate.BundleLink{}}
	if !a.signing {
		return out, fencegate.Errorf(fencegate.CodeNotFound, "no in-process registry: the chain is served where the registry runs")
	}
	cur := a.verifier.Bundle().Version()
	if after >= cur {
		return out, nil
	}
	entries := a.sigs
	prev := after
	for _, e := range entries {
		if e.Version <= after || e.Version > cur {
			continue
		}
		if e.Document == "" || e.Previous != prev {
			break
		}
		out.Bundles = append(out.Bundles, fencegate.BundleLink{Version: e.Version, Bundle: e.Document, Signature: e.Signature})
		prev = e.Version
	}
	if prev != cur {
		var kept []string
		for _, e := range entries {
			kept = append(kept, fmt.Sprint(e.Version))
		}
		return fencegate.BundleChain{}, fencegate.Errorf(fencegate.CodeNotFound,
			"trust bundle chain: no unbroken chain from version %d to %d is kept here (the last %d bundles published: versions %s): install the registry's bundle through a controlled path (replace the trust bundle file or PUT /v1/admin/trust-bundle)",
			after, cur, ChainLength, strings.Join(kept, ", "))
	}
	return out, nil
}

// FollowBundle installs a bundle document fetched from the registry this
// replica is configured with (registryURL) if its version is above the one
// in force, and persists it as the bundle file; the same rules as
// SetTrustBundle apply. It is installed only if signature (the registry's
// fencegate.BundleSignatureHeader) verifies over data under a key of the
// bundle in force here, of an epoch not revoked here: a chain from the file
// this replica started with, never a bundle whose keys vouch for
// themselves. An unsigned one is refused unless Config.AcceptUnsignedBundles.
// A bundle whose version is not above the one in force is not installed and
// not checked.
//
// When the fetched bundle (data, signature) is refused by the chain check
// (no signature by a key in force here), the bundles the registry published
// after the version in force here are fetched (chain; nil: none) and
// installed one by one through the offer path, each verified under the
// bundle installed by the step before, stopping at the first refused. If
// the bundle in force is then not at the fetched version, the fetched
// bundle is refused. A newer bundle that is refused is not installed but
// narrows trust here: the epochs it revokes become local revocations
// (narrow.go), and nothing else in it is taken. installed reports whether
// any bundle was installed; version is the fetched bundle's. A
// refusal (a document that does not parse, or the fetched bundle refused)
// is counted once (Alarm.BundleRefused). A chain that could not be fetched
// (BACKEND_UNAVAILABLE: the registry unreachable) is not counted, and its
// error is answered (BACKEND_UNAVAILABLE, which the puller backs off from
// as from a refusal before it offers the same bundle again); the fetched
// bundle still narrows trust here, as a refused one does, so that no outage
// of the chain route keeps a revoked epoch trusted. A bundle of a version
// the bundle file here holds another bundle of (persistThenInstall) is
// not installed (INTERNAL, not counted) and narrows trust here too; one of
// the version in force with other content is not installed (not counted),
// is logged as a warning, once, and narrows trust here too.
func (a *Authority) FollowBundle(ctx context.Context, data []byte, signature string, chain ChainFetcher) (installed bool, version uint64, err error) {
	installed, version, refused, err := a.follow(ctx, data, signature, chain)
	if refused {
		a.alarm.BundleRefused("registry")
	}
	return installed, version, err
}

// follow is FollowBundle but for the count: refused reports a refusal for
// FollowBundle to count, once.
func (a *Authority) follow(ctx context.Context, data []byte, signature string, chain ChainFetcher) (installed bool, version uint64, refused bool, err error) {
	b, err := proofs.ParseBundle(data)
	if err != nil {
		return false, 0, true, err
	}
	installed, why, err := a.offer(b, data, signature)
	if errors.Is(err, errFileHoldsOther) {
		// The bundle file here holds another bundle of b's version (an
		// upload here that stopped after writing it): INTERNAL and not
		// counted, as isRefusal has it (a failure here to persist b, not
		// a fault of b, cleared by the registry's next version), but b is
		// not installed, so what it revokes applies here, as for every
		// fetched bundle refused (narrow.go).
		return false, b.Version(), false, a.refuseFetched(b, err)
	}
	if why == otherOfVersion {
		// The registry's bundle of the version in force here, with
		// other content (warned of once, warnOtherOfVersion): not
		// taken and not counted, but what it revokes applies here, as
		// at any refusal of a fetched bundle (narrow.go: whether or not
		// its signature verifies here; narrowing only takes trust away).
		return false, b.Version(), false, a.refuseFetched(b, nil)
	}
	if why == notRefused {
		// Installed, refused at install (it lifts a revocation), or not
		// persisted (the next fetch tries again).
		return installed, b.Version(), isRefusal(why, err), err
	}
	if why == offChain && chain != nil {
		from := a.verifier.Bundle().Version()
		steps, werr := a.walk(ctx, chain, from)
		installed = steps > 0
		if a.verifier.Bundle().Version() >= b.Version() {
			a.log.Info("trust bundle chain from the registry followed", "from", from, "to", a.verifier.Bundle().Version(), "steps", steps)
			return installed, b.Version(), false, nil
		}
		if fencegate.ErrorCode(werr) == fencegate.CodeBackendUnavailable {
			// Not a refusal (not counted), but the fetched bundle's
			// revocations apply here all the same: a revoked epoch is
			// refused here within one pull, whether or not the chain
			// answers (the price: the chain's steps signed by a key of
			// that epoch no longer verify here; README, Known
			// limitations).
			return false, b.Version(), false, a.refuseFetched(b, fencegate.Wrap(werr, fencegate.CodeBackendUnavailable, fmt.Sprintf(
				"trust bundle: version %d not followed: the registry's chain from version %d could not be fetched (registry unreachable; a later fetch tries again)",
				b.Version(), from)))
		}
		err = fencegate.Wrap(err, fencegate.CodeInvalidRequest, fmt.Sprintf(
			"trust bundle: version %d refused; the registry's chain from version %d: %v", b.Version(), from, werr))
	}
	return installed, b.Version(), true, a.refuseFetched(b, err)
}

// walk fetches the chain after version from and offers its links in order,
// stopping at the first refused; it reports how many it installed. An
// error is the fetch's when it failed (BACKEND_UNAVAILABLE: the chain could
// not be fetched; any other code is the registry's answer, ChainFetcher),
// and otherwise INVALID_REQUEST (a wrap of offer's), never
// BACKEND_UNAVAILABLE: follow tells a chain not fetched by that code.
//
// A link admitted here that could not be persisted or installed (offer's
// INTERNAL, errFileHoldsOther among them) stops the walk as a refusal too,
// counted and backed off from, unlike the fetched bundle's own INTERNAL: a
// walk starts from the version in force, so every later walk meets that
// link first, whatever the registry publishes next, and the fetched
// bundle's revocations, applied at the first stop, refuse the links its
// revoked epochs signed from then on. The replica waits for its operator,
// whom the count alarms; not counting it had the puller fetch the whole
// chain again every bundleRefresh.
func (a *Authority) walk(ctx context.Context, chain ChainFetcher, from uint64) (steps int, err error) {
	links, err := chain(ctx, from)
	if err != nil {
		return 0, err
	}
	if len(links) == 0 {
		return 0, fencegate.Errorf(fencegate.CodeInvalidRequest, "the registry answered no bundle after version %d", from)
	}
	if len(links) > maxChainLinks {
		return 0, fencegate.Errorf(fencegate.CodeInvalidRequest, "%d bundles exceed the limit of %d", len(links), maxChainLinks)
	}
	for _, l := range links {
		doc := []byte(l.Bundle)
		lb, err := proofs.ParseBundle(doc)
		if err == nil && lb.Version() != l.Version {
			err = fmt.Errorf("the document is version %d", lb.Version())
		}
		var ok bool
		if err == nil {
			ok, _, err = a.offer(lb, doc, l.Signature)
		}
		if err != nil {
			return steps, fencegate.Wrap(err, fencegate.CodeInvalidRequest, fmt.Sprintf("stopped at version %d", l.Version))
		}
		if ok {
			steps++
			a.log.Info("trust bundle installed along the registry's chain", "version", l.Version)
		}
	}
	return steps, nil
}

// warnOtherOfVersion logs that b, fetched, has the version of cur, the
// bundle in force here, but other content: this replica holds another
// bundle of its registry's version (an upload or file here), which it keeps
// until the registry's next version (a replica takes only a higher one);
// follow applies b's revocations. It logs once while the same b is fetched
// again (only the last bundle warned of is kept: two alternating, say two
// registries behind one URL, are warned of at each fetch).
// The caller holds a.change and has checked that b is not cur.
func (a *Authority) warnOtherOfVersion(b, cur *proofs.Bundle) {
	if b.Equal(a.otherWarned) {
		return
	}
	a.otherWarned = b
	a.log.Warn("trust bundle from the registry has the version in force here with other content: this replica keeps its own until the registry publishes a higher version",
		"fetched", bundleName(b), "inForce", bundleName(cur))
}
