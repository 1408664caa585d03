package gateway

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore"
)

// A small object PUT on a store that stages (fencegate.ObjectStager: the
// local store) has its bytes written and synced while its admission
// commits, instead of after it: the two durable steps run side by side, and
// after the admission only the store's swap and directory sync are left.
// The fencing order is unchanged: staging changes no object, and the write
// is applied (the staged put's Put, under the condition the admission
// found) only once the admission is durable. A write whose admission is
// refused or replayed, or whose admitted receipt is not the one it was
// staged for, discards what was staged; the effect then runs as before.
//
// Staging pays only when the disk would otherwise idle through the
// admission: with other writes in flight in this process their syncs
// already keep it busy, and one more sync beside an admission's commit
// slows that commit as much as it saves (measured: docs/throughput.md,
// twelfth session). So a write is staged only when no other write of this
// process is between its admission and its answer (stageIdle).
//
// A refused or replayed write's staging is wasted work (a file write and
// its sync, which its answer also waits for), so a resource whose last
// admission in this process failed or was a replay is not staged for
// until a new segment is admitted there: a stale worker's retry loop, or
// a client retrying a segment already admitted, costs one staging, not
// one per attempt (refusedSet, Gateway.refused).

// stageMax: object bodies up to this size are staged (larger ones stream
// through the effect as before; their sync is a small part of their time).
const stageMax = 64 << 10

// stageIdle: a write is staged when at most this many other writes of the
// process are between admission and answer (Gateway.writing).
const stageIdle = 0

// StagingEffect is an Effect whose write can be made ready beside its
// admission (ObjectPut on a fencegate.ObjectStager). A wrapper of an
// effect that has it passes it on.
type StagingEffect interface {
	Effect
	// CanStage reports, without I/O, whether StageFor would stage.
	CanStage() bool
	// StageFor stages the write for r, the receipt its admission is to
	// create, changing nothing anyone reads. It returns the Effect that
	// publishes what was staged (its Apply as the effect's own, with
	// the staged bytes) and discard, which gives them up; after discard,
	// or a failed StageFor, the effect itself runs as if nothing had
	// been staged.
	StageFor(ctx context.Context, r fencegate.Receipt) (staged Effect, discard func(), err error)
}

// stagedWrite is a staging running beside an admission.
type stagedWrite struct {
	meta    fencegate.EffectMeta // the receipt it was staged for
	done    chan struct{}
	staged  Effect // when done: the staged effect, or nil
	discard func() // kept after use: a panic between use and publish still gives the bytes up
	used    bool   // handed to the effect (useStaged)
}

// startStage starts staging eff's write for the receipt the admission of
// areq creates, when eff stages, at most stageIdle other writes of the
// process are in flight (others, counted with this one's own count
// already raised, so two arriving together do not both see none) and the
// resource's last admission here was not refused; nil otherwise.
func (g *Gateway) startStage(ctx context.Context, eff Effect, areq *fencegate.AdmitRequest, others int64) *stagedWrite {
	s, ok := eff.(StagingEffect)
	if !ok || others > stageIdle || !s.CanStage() || g.refused.has(areq.Grant.Resource) {
		return nil
	}
	r := fencestore.NewReceipt(areq) // what the admission creates, by the stores' own rule
	w := &stagedWrite{meta: EffectMetaOf(r), done: make(chan struct{})}
	g.cfg.Go(func() {
		defer close(w.done)
		// A panic in a staging (a bug) is a failed staging: it ran on a
		// goroutine of its own, where it would end the process, and it
		// changed nothing anyone reads, so the write takes the plain path
		// (StageFor rewinds the body first).
		defer func() {
			if v := recover(); v != nil {
				g.cfg.Log.ErrorContext(ctx, "staging panicked; writing without it", "receipt", r.ID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				g.cfg.Observe.Staged("failed")
			}
		}()
		st, discard, err := s.StageFor(ctx, r)
		if err != nil {
			// The write then takes the plain path, whose own error (the
			// same disk, say) is the one that counts.
			g.cfg.Log.DebugContext(ctx, "staging failed; writing without it", "receipt", r.ID, "err", err)
			g.cfg.Observe.Staged("failed")
			return
		}
		w.staged, w.discard = st, discard
	})
	return w
}

// admitted takes the admission's verdict on eff's write to resource:
// refused (failed, or a replay) drops the staging w, and for an effect that
// stages it records what may stage next on the resource (refusedSet).
func (g *Gateway) admitted(w *stagedWrite, eff Effect, resource string, refused bool) {
	if _, ok := eff.(StagingEffect); ok {
		g.refused.note(resource, refused)
	}
	if refused {
		g.dropStaged(w)
	}
}

// useStaged waits for the staging and returns the staged effect when r,
// the admitted receipt, is the one it was staged for; otherwise it drops
// the staging and returns eff.
func (g *Gateway) useStaged(w *stagedWrite, eff Effect, r fencegate.Receipt) Effect {
	if w == nil {
		return eff
	}
	g.cfg.Block(w.done)
	if w.staged == nil || EffectMetaOf(r) != w.meta {
		g.dropStaged(w)
		return eff
	}
	// The effect's now: its Apply publishes it. discard stays, for
	// apply's deferred dropStaged: a StagedPut's Discard after its Put does
	// nothing, and the effect runs synchronously inside apply, so the drop
	// only ever gives up bytes that a panic kept from being published.
	w.used = true
	g.cfg.Observe.Staged("used")
	return w.staged
}

// dropStaged waits for the staging and gives up what it staged, so that
// the effect itself (or a shadow-mode forward) runs as if nothing had been.
func (g *Gateway) dropStaged(w *stagedWrite) {
	if w == nil {
		return
	}
	g.cfg.Block(w.done)
	if w.discard != nil {
		discard := w.discard
		w.discard, w.staged = nil, nil
		discard()
		if !w.used {
			g.cfg.Observe.Staged("discarded")
		}
	}
}

// refusedSet remembers the resources whose last admission in this process
// was refused (or failed, or was a replay), so that their next writes are
// not staged (see above). It is bounded: past refusedMax entries it starts
// over, which costs at most one wasted staging per resource forgotten.
type refusedSet struct {
	mu sync.Mutex
	m  map[string]struct{}
	n  atomic.Int64 // len(m), so that an admitted write with nothing remembered takes no lock
}

const refusedMax = 4096

func (s *refusedSet) has(resource string) bool {
	if s.n.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[resource]
	return ok
}

// note records the verdict of an admission on resource: refused (failed,
// replayed) or a new segment admitted.
func (s *refusedSet) note(resource string, refused bool) {
	if !refused && s.n.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !refused:
		delete(s.m, resource)
	case s.m == nil || len(s.m) >= refusedMax:
		s.m = map[string]struct{}{resource: {}}
	default:
		s.m[resource] = struct{}{}
	}
	s.n.Store(int64(len(s.m)))
}
