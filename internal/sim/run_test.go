package sim

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/history"
)

// stats are the counters of a batch of runs.
type stats struct {
	mu       sync.Mutex
	injected map[string]int
	gates    map[string]int
	codes    map[string]int
	runs     int
	steps    int
	ops      int
}

func newStats() *stats {
	return &stats{injected: map[string]int{}, gates: map[string]int{}, codes: map[string]int{}}
}

func (s *stats) inject(item string)         { s.mu.Lock(); s.injected[item]++; s.mu.Unlock() }
func (s *stats) injectN(name string, n int) { s.mu.Lock(); s.injected[name] += n; s.mu.Unlock() }
func (s *stats) gate(name string)           { s.mu.Lock(); s.gates[name]++; s.mu.Unlock() }
func (s *stats) code(c string) {
	if c == "" {
		c = "accepted"
	}
	s.mu.Lock()
	s.codes[c]++
	s.mu.Unlock()
}

// Gates: each must stay 0.
var gates = []string{"accepted stale", "forged accepted", "expired owner", "skipped segment", "regressed token",
	"revoked epoch accepted", "stale policy accepted", "replay of another payload",
	"auth failure touched state", "two effects in flight", "landed after not applied", "unknown unsettled after 15 min",
	"admitted receipt unsettled after 15 min", "not linearizable",
	"answered COMMITTED, settled otherwise", "answered COMMITTED, read otherwise",
	"admitted past a deferred settle", "admission sent past its own deferred settle", "fence issued twice", "resource held by two leases",
	"admitted beside an unsettled effect", "final receipt changed", "regression answered as the holder's write",
	"out-of-band write overwritten", "committed over an out-of-band write"}

func table(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-45s %d\n", k, m[k])
	}
	return b.String()
}

// simulate runs seed to completion and returns the broken invariants.
func simulate(w *world) []string {
	ctx := context.Background()
	for i := range w.cfg.gateways {
		w.startGateway(ctx, i)
	}
	live := w.cfg.workers
	for i := range w.cfg.workers {
		wk := &worker{w: w, id: i, name: fmt.Sprint("w", i)}
		w.s.spawn(ctx, wk.name, func(ctx context.Context) {
			wk.run(ctx)
			live--
		})
	}
	w.s.spawn(ctx, "operator", w.operate)
	w.s.spawn(ctx, "reader", func(ctx context.Context) {
		for !w.finished {
			w.s.sleep(ctx, time.Duration(200+w.rng.IntN(1500))*time.Millisecond)
			w.read(ctx)
			w.readReceipt(ctx)
		}
	})
	if w.oob != nil {
		w.s.spawn(ctx, "out-of-band", w.oobWriter)
	}
	w.s.spawn(ctx, "monitor", func(ctx context.Context) {
		for live > 0 {
			w.s.sleep(ctx, time.Second)
		}
		w.stopping = true // no more faults: let every outcome settle
		stop := w.clock.Now()
		for {
			w.s.sleep(ctx, 5*time.Second)
			n := 0
			for _, state := range []fencegate.ReceiptState{fencegate.ReceiptPending, fencegate.ReceiptUnknown} {
				rs, err := w.store.ReceiptsByState(ctx, state, fencegate.Page{Limit: 1000})
				if err != nil {
					w.fail("list %s: %v", state, err)
				}
				n += len(rs.Receipts)
				if w.clock.Now().Sub(stop) > unknownDeadline {
					for _, r := range rs.Receipts {
						w.fail("unsettled: %s %s fence %d seg %d target %s created %s error %q", r.ID, r.State, r.FenceToken, r.Segment,
							r.Target, r.CreatedAt.Format("15:04:05.000"), r.Error)
					}
				}
			}
			// The lists are the store's own account, the one the
			// reconcilers work from: a store whose list leaves a receipt
			// out would pass a check of them alone. The simulation's own
			// record of the admissions it saw commit, each read by ID,
			// must come out settled too.
			left := w.unsettledByRecord(ctx)
			if n == 0 && len(left) == 0 {
				break
			}
			if w.clock.Now().Sub(stop) > unknownDeadline {
				if n > 0 {
					w.stats.gate("unknown unsettled after 15 min")
					w.fail("%d receipts still PENDING or UNKNOWN 15 minutes after the faults stopped", n)
				}
				if len(left) > 0 {
					w.stats.gate("admitted receipt unsettled after 15 min")
					w.fail("%d receipts admitted are not settled final 15 minutes after the faults stopped, first: %s", len(left), left[0])
				}
				break
			}
		}
		for range 3 { // reads after everything settled
			w.read(ctx)
		}
		w.checkAnswers(ctx) // every write answered COMMITTED, through a gateway
		w.finished = true
	})
	if err := w.s.run(); err != nil {
		w.fail("%v", err)
	}
	w.oobCheckEnd()
	w.stats.mu.Lock()
	w.stats.runs++
	w.stats.steps += w.s.steps
	w.stats.ops += w.hist.Len()
	w.stats.mu.Unlock()
	return w.errs
}

// unsettledByRecord reads by ID, from the store itself, every receipt the
// simulation saw admitted and never saw settled final (w.unsettled), and
// describes those not final (or not found) there, in ID order.
func (w *world) unsettledByRecord(ctx context.Context) []string {
	w.unsettledMu.Lock()
	var ids []string
	for _, rs := range w.unsettled {
		for id := range rs {
			ids = append(ids, id)
		}
	}
	w.unsettledMu.Unlock()
	sort.Strings(ids)
	var left []string
	for _, id := range ids {
		r, err := w.store.Receipt(ctx, id)
		switch {
		case err != nil:
			left = append(left, fmt.Sprintf("%s: %v", id, err))
		case !r.State.Terminal():
			left = append(left, fmt.Sprintf("%s %s fence %d seg %d target %s", r.ID, r.State, r.FenceToken, r.Segment, r.Target))
		}
	}
	return left
}

// done reports whether background tasks should end.
func (w *world) done() bool { return w.finished }

// read reads one register straight from its backend.
func (w *world) read(ctx context.Context) {
	r := w.res[w.rng.IntN(len(w.res))]
	key := r.key(uint64(w.rng.IntN(2)))
	w.point(ctx, "read")
	if w.oob != nil && !r.api && len(w.oob.writes[key]) > 0 {
		return // no fenced register any more: changed out of band
	}
	call := w.hist.Invoke(w.cfg.workers, history.Input{Kind: history.Read, Resource: r.name, Key: key})
	val := ""
	if r.api {
		val = w.upstream.payout[r.acct]
	} else if rc, _, err := w.objects.Get(ctx, key); err == nil {
		b, _ := io.ReadAll(rc)
		_ = rc.Close()
		val = string(b)
	}
	call.Return(history.Output{Value: val})
}

// operate is the operator: policy bumps, one key rotation with revocation of
// the old epoch, and snapshots of the coordination state restored later (with
// the fence floor raised afterwards, as the runbook says).
func (w *world) operate(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	rotated := false
	for !w.stopping {
		w.s.sleep(ctx, time.Duration(float64(3000+w.rng.IntN(12000))**operatorFlag)*time.Millisecond)
		if w.stopping || !w.cfg.faults {
			continue
		}
		switch w.rng.IntN(5) {
		case 0:
			w.stats.inject("stale policy")
			w.auth.bumpPolicy(w.clock.Now())
		case 1:
			if !rotated {
				rotated = true
				w.stats.inject("revoked issuer epoch")
				if err := w.rotateNext(); err != nil { // and the old epoch is revoked at once
					w.fail("rotate: %v", err)
				}
			}
		case 2, 3:
			if w.snapshot == "" && w.restoresBehind() && w.rng.IntN(2) == 0 {
				// A failover to a replica that lacks the next acquisition
				// (worker.acquireRes snapshots the backend right before
				// it) and whatever follows it up to the next renewal
				// (worker.renew), where the failover happens: when only
				// that acquisition is lost, the renewal alone would bring
				// the revision back to the one the registry saw.
				w.failoverArmed = true
				for (w.failoverArmed || w.failoverDue) && !w.stopping {
					w.s.sleep(ctx, 50*time.Millisecond)
				}
				if !w.failoverArmed && !w.failoverDue {
					w.floorAfterRestore(ctx)
				}
				w.failoverArmed, w.failoverDue = false, false
				continue
			}
			if w.snapshot == "" {
				w.takeSnapshot()
				if w.rng.IntN(2) == 0 {
					continue // an old snapshot, restored later
				}
				// a failover to a replica that lags a moment behind
				w.s.sleep(ctx, time.Duration(100+w.rng.IntN(1500))*time.Millisecond)
			}
			w.stats.inject("restore of an old coordination snapshot")
			// Half the worlds with the registry's loss check on put it
			// back behind the running registry, which must find the loss
			// at its next mutation (the guard of every acquire, renewal,
			// release and floor), before renewals move the restored
			// revision back up to the one it saw (restoresBehind).
			behind := w.restoresBehind()
			if behind {
				w.stats.inject("restore behind a running registry")
			}
			if err := w.restore(behind); err != nil {
				w.fail("restore: %v", err)
			}
			w.floorAfterRestore(ctx)
		case 4:
			w.stats.inject("fence floor raised")
			_ = w.reg.SetFloor(ctx, 0)
		}
	}
}

// floorAfterRestore is the runbook's step after a restore: fences issued now
// may regress, so the operator raises the floor above every fence the
// gateways hold, a little later.
func (w *world) floorAfterRestore(ctx context.Context) {
	w.s.sleep(ctx, time.Duration(w.rng.IntN(5000))*time.Millisecond)
	var floor uint64
	for _, r := range w.res {
		if rs, err := w.store.Resource(ctx, r.name); err == nil {
			floor = max(floor, rs.HighestFence)
		}
	}
	if err := w.reg.SetFloor(ctx, floor); err != nil {
		w.fail("floor: %v", err)
	}
}

// takeSnapshot copies the registry's database aside.
func (w *world) takeSnapshot() {
	w.snapshot = w.regDB + ".snap"
	if err := w.regDBh.View(func(tx *bbolt.Tx) error { return tx.CopyFile(w.snapshot, 0o600) }); err != nil {
		w.fail("snapshot: %v", err)
	}
}

// restore puts the registry's database back to the snapshot, as an operator
// restoring a backup (or a failover to a lagging replica) would: with the
// registry restarted on it, or behind the running one.
func (w *world) restore(behind bool) error {
	if err := w.regDBh.Close(); err != nil {
		return err
	}
	data, err := os.ReadFile(w.snapshot)
	if err != nil {
		return err
	}
	if err := os.WriteFile(w.regDB, data, 0o600); err != nil {
		return err
	}
	w.snapshot = ""
	if behind {
		return w.openBackend()
	}
	w.restartedOnRestore = true
	return w.openRegistry()
}

// tamper rewrites one claim of a token's payload (raw JSON value) and keeps
// the signature.
func tamper(token, claim, raw string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return token + "x"
	}
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var m map[string]json.RawMessage
	if json.Unmarshal(payload, &m) != nil {
		return token + "x"
	}
	m[claim] = json.RawMessage(raw)
	b, _ := json.Marshal(m)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}
