package app

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
)

// background runs the periodic work of a serving gateway until ctx ends:
// reconciliation passes (raising overdue UNKNOWN receipts on the
// fencegate_unknown_overdue gauge and in the log), retention passes
// (retention.go), and, for a gateway without
// an in-process registry, reloading the trust bundle file when it changes;
// with one, checking its coordination backend for lost state (and
// remembering what it saw), then pruning a batch of its lease records past
// retention (Registry.Watch).
func (a *App) background(ctx context.Context) {
	if a.remote != nil {
		done := make(chan struct{})
		go func() { defer close(done); a.pullBundles(ctx) }()
		defer func() { <-done }()
	}
	compacted := make(chan struct{})
	go func() { defer close(compacted); a.compactLoop(ctx) }()
	defer func() { <-compacted }()
	t := time.NewTicker(a.cfg.Reconcile.Interval)
	defer t.Stop()
	for {
		if _, err := a.reconciler.RunOnce(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("reconcile pass failed", "err", err)
		}
		if a.Registry == nil {
			a.reloadBundle()
		} else if err := a.Registry.Watch(ctx); err != nil && ctx.Err() == nil && fencegate.ErrorCode(err) != fencegate.CodeStateLost {
			a.log.Warn("registry incarnation check or lease pruning failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reloadBundle installs the trust bundle file if it holds a higher version;
// a file that is refused (does not parse, lifts a revocation, ...) changes
// nothing, is logged once for each version and reason (a file that does not
// load has no version: its reason tells one such file from the next) and
// counted at every reload (by the authority:
// fencegate_trust_bundle_refusals_total{source="file"}).
func (a *App) reloadBundle() {
	installed, version, err := a.auth.ReloadBundle()
	if err == nil {
		a.refusedBundle = ""
	}
	switch {
	case err != nil:
		if key := fmt.Sprintf("%d %v", version, err); key != a.refusedBundle {
			a.refusedBundle = key
			a.log.Error("trust bundle file refused", "version", version, "err", err)
		}
	case installed:
		a.log.Info("trust bundle reloaded", "version", version, "revokedEpochs", a.auth.Verifier().Bundle().RevokedEpochs())
	}
}

// pullBundles fetches the registry's trust bundle every bundleRefresh until
// ctx ends and offers it to the authority, which installs a newer version
// (with its revocations) signed by a key of the bundle in force here, or
// reached along the registry's chain (GET /v1/trust-bundle/chain) from it,
// and refuses one that lifts a revocation or goes back, or is not so signed
// (unsigned: unless registryBundleUnsigned is accept). A refused bundle
// leaves the bundle in force as it is, with what it revokes revoked here
// (authority.FollowBundle).
// Failures are logged once each until the next success.
func (a *App) pullBundles(ctx context.Context) {
	t := time.NewTicker(a.cfg.BundleRefresh)
	defer t.Stop()
	for {
		a.pull(ctx, 0)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pull fetches the registry's trust bundle and offers it to the authority
// (which installs a newer one), unless a pull ended within fresh: pullBundles'
// tick (fresh 0), and the remote querier's at once when the registry's answer
// does not verify (a key it rotated to since; fresh a second, so a burst of
// such answers waits for one pull instead of making one each). A failure is
// logged once until the next success.
func (a *App) pull(ctx context.Context, fresh time.Duration) {
	a.pullMu.Lock()
	defer a.pullMu.Unlock()
	now := time.Now
	if a.pullClock != nil {
		now = a.pullClock
	}
	if fresh > 0 && now().Sub(a.pulledAt) < fresh {
		return
	}
	defer func() { a.pulledAt = now() }()
	data, sig, err := a.remote.FetchBundle(ctx)
	var installed bool
	var version uint64
	if err == nil {
		// The fetched bundle and the one in force here (an operator's
		// install here changes it too), hashed only while backing off or
		// after a refusal: not on every pull.
		key := func() [sha256.Size]byte {
			inForce := a.auth.Verifier().Bundle().Version()
			return sha256.Sum256(fmt.Appendf(nil, "%d\x00%s\x00%s", inForce, sig, data))
		}
		if now().Before(a.refused.until) && key() == a.refused.key {
			return // the bundle refused (or not followed) last time, unchanged: backing off
		}
		installed, version, err = a.auth.FollowBundle(ctx, data, sig, a.remote.FetchChain)
		if err != nil {
			a.refused = a.refused.after(key(), err, now())
		} else {
			a.refused = refusedFetch{}
		}
	}
	switch held := a.auth.Verifier().Bundle().Version(); {
	case err != nil && ctx.Err() == nil && err.Error() != a.pullErr:
		a.pullErr = err.Error()
		a.log.Error("trust bundle from the registry refused or unreachable", "version", version, "err", err)
	case err == nil && version < held:
		// The registry went back (restored, or another registry behind
		// the URL): its keys are not taken until its version passes ours.
		if msg := fmt.Sprintf("older %d", version); msg != a.pullErr {
			a.pullErr = msg
			a.log.Warn("trust bundle from the registry is older than the one in force here: ignored; keys it rotated to since are not trusted until its version passes this one",
				"version", version, "inForce", held)
		}
	case err == nil:
		a.pullErr = ""
	}
	if installed {
		a.log.Info("trust bundle fetched from the registry", "version", a.auth.Verifier().Bundle().Version(),
			"revokedEpochs", a.auth.Verifier().Bundle().RevokedEpochs())
	}
}

// refusedFetch is pull's backoff for a fetched bundle the authority did
// not follow: refused (INVALID_REQUEST: a replica with no key in common
// with its registry, which would otherwise fetch the registry's chain every
// bundleRefresh), or off the chain here with the registry's chain not
// fetched (BACKEND_UNAVAILABLE from FollowBundle: the chain route failing,
// which would otherwise be fetched again every bundleRefresh and at each
// status that does not verify). The same bundle (document and signature,
// with the same bundle in force here) is offered again after 1 s, doubling
// for the same bundle and the same cause up to a cap: a minute after a
// refusal, 5 s after a chain not fetched (nothing tells the replica the
// chain route is back, and meanwhile statuses under the registry's new key
// do not verify here, so a route back up is used within 5 s); each cause
// keeps its own doubling for the bundle (a cause after the other goes on
// from its own last wait, or 1 s the first time: a chain route flapping,
// refused then unfetched then refused, does not start the refusal's wait
// again at each change), and two bundles share none (any other is offered
// at once). Meanwhile the same bundle is
// fetched and not offered, so not counted as refused again (the authority
// counts each refusal, and not a chain it could not fetch:
// fencegate_trust_bundle_refusals_total; it applied the bundle's
// revocations at the first offer either way). A change at the registry, or
// an operator's install here, changes the key; a failure to apply a refused
// bundle's revocations here is INTERNAL and tried again at the next pull. A
// bundle that could not be fetched (FetchBundle) is not offered and leaves
// the backoff as it was: the next pull fetches it again.
type refusedFetch struct {
	key   [sha256.Size]byte
	until time.Time // the bundle key is not offered again before
	// The last wait of each cause for key (0: none yet).
	refusedWait, unfetchedWait time.Duration
}

// Backoff caps of refusedFetch, by cause.
const (
	refusedBackoffCap   = time.Minute     // INVALID_REQUEST: the bundle refused
	unfetchedBackoffCap = 5 * time.Second // BACKEND_UNAVAILABLE: its chain not fetched
)

// after is the backoff once the bundle key was offered at now with result
// err.
func (r refusedFetch) after(key [sha256.Size]byte, err error, now time.Time) refusedFetch {
	if key != r.key {
		r = refusedFetch{key: key}
	}
	var last *time.Duration
	var limit time.Duration
	switch fencegate.ErrorCode(err) {
	case fencegate.CodeInvalidRequest:
		last, limit = &r.refusedWait, refusedBackoffCap
	case fencegate.CodeBackendUnavailable:
		last, limit = &r.unfetchedWait, unfetchedBackoffCap
	default:
		return refusedFetch{}
	}
	*last = min(max(2**last, time.Second), limit)
	r.until = now.Add(*last)
	return r
}

// raiseOverdue alarms on UNKNOWN receipts past the reconcile deadline: an
// error log line each (the reconciler sets the fencegate_unknown_overdue
// gauge through the metrics observer).
func (a *App) raiseOverdue(overdue []fencegate.Receipt) {
	for _, r := range overdue {
		a.log.Error("UNKNOWN receipt needs manual reconciliation", "receipt", r.ID, "target", r.Target, "age", time.Since(r.CreatedAt).Round(time.Second))
	}
}
