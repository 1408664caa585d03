package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/registry"
)

// Gateway settings of the run, in simulated time.
const (
	effectTimeout   = 20 * time.Second
	orphanAfter     = 30 * time.Second // > effectTimeout, as the reconciler requires
	unknownDeadline = 15 * time.Minute
	// storeBodyTime is the longest the modelled S3 store takes from a
	// request's headers, where it checks the expiry, to applying its body;
	// orphanAfter, the grace after a write's expiry, must cover it.
	storeBodyTime = 29 * time.Second
)

// simAuthority is the operator state of the run: the registry issues from it
// (registry.Authority) and every gateway enforces it (gateway.Policy). It
// survives a registry restore, as the operator's state does.
type simAuthority struct {
	is registry.Issuing
	// revokedAt[e]: when epoch e was revoked; staleAt[g]: when policy
	// generation g stopped being current.
	revokedAt, staleAt map[uint64]time.Time
}

func (a *simAuthority) Issuing() registry.Issuing      { return a.is }
func (a *simAuthority) PolicyGeneration() uint64       { return a.is.PolicyGeneration }
func (a *simAuthority) EpochRevoked(epoch uint64) bool { return a.is.Revoked[epoch] }

func (a *simAuthority) bumpPolicy(now time.Time) {
	a.staleAt[a.is.PolicyGeneration] = now
	a.is.PolicyGeneration++
}

// rotate signs with s for epoch e and revokes the epoch signing so far.
// Revocations accumulate, as package authority's do: every epoch revoked
// stays revoked through later rotations.
func (a *simAuthority) rotate(s registry.Signer, e uint64, now time.Time) {
	old := a.is.Epoch
	a.is = registry.Issuing{Signer: s, Epoch: e, PolicyGeneration: a.is.PolicyGeneration, Revoked: a.is.Revoked}
	a.revoke(old, now)
}

// revoke revokes epoch e (a fresh map: a handed-out Revoked is never
// modified).
func (a *simAuthority) revoke(e uint64, now time.Time) {
	if a.is.Revoked[e] {
		return
	}
	a.revokedAt[e] = now
	revoked := map[uint64]bool{e: true}
	for k := range a.is.Revoked {
		revoked[k] = true
	}
	a.is.Revoked = revoked
}

// querier is a query-mode gateway's linearizable status query.
type querier struct{ w *world }

func (q querier) GrantStatus(ctx context.Context, g fencegate.VerifiedGrant) (fencegate.Status, error) {
	q.w.point(ctx, "status-query")
	return q.w.reg.GrantStatus(ctx, g)
}

func (q querier) GrantDelegationStatus(ctx context.Context, g fencegate.VerifiedGrant, d fencegate.Delegation) (fencegate.Status, error) {
	q.w.point(ctx, "status-query")
	return q.w.reg.GrantDelegationStatus(ctx, g, d)
}

// startGateway starts (or restarts after a crash) gateway process idx with a
// fresh verifier, a fresh in-process state and its own reconciler task.
func (w *world) startGateway(ctx context.Context, idx int) {
	old := (*gwInst)(nil)
	if idx < len(w.gws) {
		old = w.gws[idx]
	}
	gi := &gwInst{idx: idx, query: idx%2 == 1, busy: map[string]bool{}}
	if old != nil {
		gi.gen = old.gen + 1
	}
	v, err := proofs.NewVerifier(w.bundle, proofs.WithClock(w.clock.Now))
	if err != nil {
		w.fail("verifier: %v", err)
		return
	}
	objects := func(target string) gateway.Resolver {
		if _, _, ok := fencegate.SplitObjectTarget(target); ok {
			return simProver{gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"local": w.op}, Now: w.clock.Now,
				EffectTimeout: effectTimeout, Grace: orphanAfter}, w}
		}
		return nil
	}
	// The process's background work (deferred flushes, settle retries)
	// runs as its own tasks, tagged with the process: a crash ends it at
	// its next interception point, as it ends the requests.
	bg := context.WithValue(ctx, reqKey{}, &reqInfo{gw: gi, gen: gi.gen})
	cfg := gateway.Config{Verifier: v, Store: w.sp, Policy: w.auth, Now: w.clock.Now,
		After: func(d time.Duration) <-chan time.Time {
			w.s.sleep(ctx, d)
			c := make(chan time.Time, 1)
			c <- w.clock.Now()
			return c
		},
		Go: func(f func()) {
			w.s.spawn(ctx, fmt.Sprint("gw", idx, "-background"), func(context.Context) {
				defer survive()
				f()
			})
		},
		Block:      func(ch <-chan struct{}) { w.block(gi, ch) },
		Background: bg, DeferSettle: w.deferWindow, Resolver: objects,
		NewID: func() string { return w.newID("rcpt") }, Log: discard, EffectTimeout: effectTimeout}
	if gi.query {
		cfg.Querier = querier{w}
	}
	if gi.g, err = gateway.New(cfg); err != nil {
		w.fail("gateway: %v", err)
		return
	}
	gi.rc = &gateway.Reconciler{Store: w.sp, Now: w.clock.Now, Orphan: orphanAfter, Deadline: unknownDeadline, Log: discard,
		Resolver: httpapi.Resolvers{"payouts": w.api}.Or(objects)}
	if idx < len(w.gws) {
		w.gws[idx] = gi
	} else {
		w.gws = append(w.gws, gi)
	}
	w.s.spawn(ctx, "reconciler", func(ctx context.Context) { w.reconcile(ctx, gi) })
}

// reconcile runs the reconciler's passes of one gateway process until it
// crashes or the run ends.
func (w *world) reconcile(ctx context.Context, gi *gwInst) {
	for !gi.crashed && !w.done() {
		w.s.sleep(ctx, time.Duration(1000+w.rng.IntN(4000))*time.Millisecond)
		func() {
			defer func() {
				if v := recover(); v != nil {
					if _, ok := v.(crashed); !ok {
						panic(v)
					}
				}
			}()
			rctx := context.WithValue(ctx, reqKey{}, &reqInfo{gw: gi, gen: gi.gen})
			_, _ = gi.rc.RunOnce(rctx)
		}()
	}
}

// crash kills gateway process gi: its requests and background work die at
// their next interception point, and a fresh process takes its place.
func (w *world) crash(gi *gwInst) {
	if gi.g != nil && gi.g.DeferredSettles() > 0 {
		w.stats.inject("gateway crash with a deferred settle not durable")
	}
	gi.crashed = true
	w.startGateway(context.Background(), gi.idx)
}

// survive ends a task of a crashed process quietly.
func survive() {
	if v := recover(); v != nil {
		if _, ok := v.(crashed); !ok {
			panic(v)
		}
	}
}

// block is gateway.Config.Block under the scheduler: it waits for ch in
// simulated time, and dies with its process.
func (w *world) block(gi *gwInst, ch <-chan struct{}) {
	start := w.clock.Now()
	for {
		select {
		case <-ch:
			return
		default:
		}
		if gi.crashed {
			panic(crashed{})
		}
		if w.clock.Now().Sub(start) > unknownDeadline {
			w.fail("gw%d/%d waited %v for a deferred settle in flight", gi.idx, gi.gen, unknownDeadline)
			return
		}
		w.s.sleep(context.Background(), time.Millisecond)
	}
}

// simProver is the object resolver of the run: it counts the deferred
// settles proven from their objects, and in a world without prompt proofs
// (-sim.prove=false) it proves nothing before Orphan (Prove answers no), so
// that only the answering process can make its settle durable in time.
type simProver struct {
	gateway.ObjectResolver
	w *world
}

func (p simProver) Prove(ctx context.Context, r fencegate.Receipt) (fencegate.Outcome, bool, error) {
	if !p.w.cfg.prove {
		return fencegate.Outcome{}, false, nil
	}
	out, ok, err := p.ObjectResolver.Prove(ctx, r)
	if ok {
		if _, answered := p.w.answered[r.ID]; answered {
			p.w.stats.inject("deferred settle proven from its object")
		}
	}
	return out, ok, err
}
