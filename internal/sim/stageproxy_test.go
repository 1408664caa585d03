package sim

import (
	"context"
	"sync/atomic"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// Staging beside the admission (gateway/stage.go) through the simulation's
// effect wrapper and object proxy.

// CanStage is the wrapped effect's (gateway.StagingEffect).
func (e effect) CanStage() bool {
	s, ok := e.inner.(gateway.StagingEffect)
	return ok && s.CanStage()
}

// StageFor stages through the wrapped effect; what it returns is wrapped
// too, so a staged write is counted as any forwarded effect is.
func (e effect) StageFor(ctx context.Context, r fencegate.Receipt) (gateway.Effect, func(), error) {
	st, discard, err := e.inner.(gateway.StagingEffect).StageFor(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	return effect{e.w, st}, discard, nil
}

// Stage is the local store's staging over the network: it may fail (the
// gateway then writes as if nothing was staged). The staged put it returns
// meets the network as Put does: a timeout before it is sent, a lost
// answer, or a late delivery after the gateway gave up.
func (p *objectProxy) Stage(ctx context.Context, req fencegate.PutRequest) (fencegate.StagedPut, error) {
	w := p.w
	w.point(ctx, "stage")
	if w.chance(0.05) {
		w.stats.inject("staging failed")
		return nil, fencegate.Errorf(fencegate.CodeBackendUnavailable, "staging failed")
	}
	sp, err := p.inner.(fencegate.ObjectStager).Stage(ctx, req)
	if err != nil {
		return nil, err
	}
	w.stats.inject("write staged beside its admission")
	return &stagedProxy{p: p, req: req, inner: sp}, nil
}

// stagedProxy is a staged put through objectProxy's network.
type stagedProxy struct {
	p     *objectProxy
	req   fencegate.PutRequest // what was staged (its condition is the Put's)
	inner fencegate.StagedPut
	sent  atomic.Bool // Put was called: a Discard after it does nothing (the contract), even while the put is held for a late landing
}

func (s *stagedProxy) Put(ctx context.Context, ifMatch string, ifNoneMatch bool) (string, error) {
	s.sent.Store(true)
	req := s.req
	req.IfMatch, req.IfNoneMatch = ifMatch, ifNoneMatch
	return s.p.send(ctx, req, sender{
		now: s.land,
		later: func(fencegate.PutRequest) func(context.Context, fencegate.PutRequest) (string, error) {
			return s.land // the staged bytes wait in the store
		},
		drop: s.inner.Discard,
	})
}

// land publishes the staged write and checks what landed.
func (s *stagedProxy) land(ctx context.Context, req fencegate.PutRequest) (string, error) {
	etag, err := s.inner.Put(ctx, req.IfMatch, req.IfNoneMatch)
	if err == nil {
		s.p.w.onLanded(req)
	}
	return etag, err
}

// Discard gives the staged bytes up, unless Put was called: what was sent
// may still land (the network holds it), as a real store's would.
func (s *stagedProxy) Discard() {
	if !s.sent.Load() {
		s.inner.Discard()
	}
}
