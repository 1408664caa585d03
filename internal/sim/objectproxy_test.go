package sim

import (
	"bytes"
	"context"
	"io"
	"time"

	"github.com/fencegate/fencegate"
)

// objectProxy is the network between gateways and the object store: a put
// may time out before it is sent, lose its answer, or arrive late (after the
// gateway gave up), as a delayed old message.
type objectProxy struct {
	w     *world
	inner fencegate.ObjectStore
}

func (p *objectProxy) Name() string { return p.inner.Name() }

func (p *objectProxy) Put(ctx context.Context, req fencegate.PutRequest) (string, error) {
	return p.send(ctx, req, sender{
		now: p.land,
		later: func(req fencegate.PutRequest) func(context.Context, fencegate.PutRequest) (string, error) {
			body, _ := io.ReadAll(req.Body) // the gateway's body is gone by the time it lands
			return func(ctx context.Context, req fencegate.PutRequest) (string, error) {
				req.Body = bytes.NewReader(body)
				return p.land(ctx, req)
			}
		},
	})
}

// sender is how the network hands one put to the store: now sends it as
// the gateway makes it; later, called when the gateway gives up on it,
// returns how to send it after a delay; drop (nil: nothing to do) gives
// up a put that will never be sent.
type sender struct {
	now   func(context.Context, fencegate.PutRequest) (string, error)
	later func(fencegate.PutRequest) func(context.Context, fencegate.PutRequest) (string, error)
	drop  func()
}

// send is the network of a put, plain or staged: it may time out before
// it is sent, lose its answer, or arrive late (after the gateway gave up),
// as a delayed old message.
func (p *objectProxy) send(ctx context.Context, req fencegate.PutRequest, s sender) (string, error) {
	w := p.w
	w.point(ctx, "effect")
	switch {
	case w.chance(0.02):
		w.stats.inject("effect timeout")
		if s.drop != nil {
			s.drop()
		}
		return "", fencegate.Wrap(context.DeadlineExceeded, fencegate.CodeBackendUnavailable, "put timed out")
	case w.chance(0.02):
		w.stats.inject("effect lost answer")
		_, _ = s.now(context.WithoutCancel(ctx), req)
		return "", fencegate.Wrap(io.ErrUnexpectedEOF, fencegate.CodeBackendUnavailable, "put answer lost")
	case w.chance(0.015):
		w.stats.inject("delayed old message (backend)")
		p.late(ctx, req, s.later(req), s.drop)
		return "", fencegate.Wrap(context.DeadlineExceeded, fencegate.CodeBackendUnavailable, "put timed out")
	}
	etag, err := s.now(ctx, req)
	w.point(ctx, "after-effect")
	return etag, err
}

// land hands req to the store and checks what landed.
func (p *objectProxy) land(ctx context.Context, req fencegate.PutRequest) (string, error) {
	etag, err := p.inner.Put(ctx, req)
	if err == nil {
		p.w.onLanded(req)
	}
	return etag, err
}

// late delivers req with land after the gateway gave up on it: up to 2
// simulated minutes later, half the time within its expiry
// (fencegate.LandBy). The request carries its expiry as a presigned S3
// request does. Half of the late writes meet a store that, as S3, checks
// the expiry when the headers arrive (a refused one is dropped) and
// applies the body up to storeBodyTime later; the others meet the local
// store's own check, made right before the write lands.
func (p *objectProxy) late(ctx context.Context, req fencegate.PutRequest, land func(context.Context, fencegate.PutRequest) (string, error), drop func()) {
	w := p.w
	landBy, bounded := fencegate.LandBy(ctx)
	delay := time.Duration(w.rng.IntN(120_000)) * time.Millisecond
	if bounded && w.rng.IntN(2) == 0 {
		delay = time.Duration(w.rng.Int64N(int64(max(landBy.Sub(w.clock.Now()), time.Millisecond))))
	}
	headersFirst := w.rng.IntN(2) == 0
	w.s.spawn(context.Background(), "late-put", func(lctx context.Context) {
		w.s.sleep(lctx, delay)
		if !headersFirst {
			if bounded {
				lctx = fencegate.WithLandBy(lctx, landBy)
			}
			if _, err := land(lctx, req); err != nil && bounded && !w.clock.Now().Before(landBy) {
				w.stats.inject("late write refused on arrival")
			}
			return
		}
		if bounded && !w.clock.Now().Before(landBy) {
			w.stats.inject("late write refused on arrival")
			if drop != nil {
				drop()
			}
			return
		}
		w.s.sleep(lctx, time.Duration(w.rng.Int64N(int64(storeBodyTime))))
		_, _ = land(lctx, req)
	})
}

func (p *objectProxy) Delete(ctx context.Context, key, ifMatch string) error {
	p.w.point(ctx, "effect")
	return p.inner.Delete(ctx, key, ifMatch)
}

func (p *objectProxy) Get(ctx context.Context, key string) (io.ReadCloser, fencegate.ObjectInfo, error) {
	p.w.point(ctx, "read")
	return p.inner.Get(ctx, key)
}

func (p *objectProxy) Head(ctx context.Context, key string) (fencegate.ObjectInfo, error) {
	p.w.point(ctx, "read")
	return p.inner.Head(ctx, key)
}
