package local

import (
	"context"
	"sync/atomic"

	"github.com/fencegate/fencegate"
)

// Stage is a Put's step 1 alone (fencegate.ObjectStager): the body and its
// trailer are written into a spare and fdatasync'ed, and no object changes.
// The returned StagedPut's Put is steps 2 to 4 (the condition, the swap,
// the shared directory fsync, the replaced file kept as a spare), with the
// same guarantees as a Put; its Discard gives the spare back. Until one of
// them runs, the spare is this write's alone, under a temp name no read
// looks at; a crash meanwhile leaves garbage that New removes. The
// object's time written (its trailer's, LastModified) is when it was
// staged.
//
// The gateway stages a small write while its admission commits, so the
// write's file sync runs beside the admission's instead of after it: the
// object itself still changes only once the admission is durable.
func (s *Store) Stage(ctx context.Context, req fencegate.PutRequest) (fencegate.StagedPut, error) {
	req.IfMatch, req.IfNoneMatch = "", true // the condition is the StagedPut's
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if !s.life.enter() {
		return nil, s.closedErr("stage", req.Key)
	}
	defer s.life.leave()
	// No directory-sync ticket: the rename may come long after (an
	// admission in between), and no directory fsync is to wait for it.
	sp, etag, _, err := s.writeSpare(ctx, req, false)
	if err != nil {
		return nil, err
	}
	return &staged{s: s, key: req.Key, sp: sp, etag: etag}, nil
}

// staged is a filled spare waiting for its Put or Discard.
type staged struct {
	s    *Store
	key  string
	sp   spare
	etag string
	used atomic.Bool
}

// Put publishes the staged write under its condition (Store.publish).
func (p *staged) Put(ctx context.Context, ifMatch string, ifNoneMatch bool) (string, error) {
	if p.used.Swap(true) {
		return "", fencegate.Errorf(fencegate.CodeInternal, "staged put of %q used twice", p.key)
	}
	req := fencegate.PutRequest{Key: p.key, IfMatch: ifMatch, IfNoneMatch: ifNoneMatch}
	if err := req.Validate(); err != nil {
		p.release()
		return "", err
	}
	if !p.s.life.enter() {
		p.release()
		return "", p.s.closedErr("put", p.key)
	}
	defer p.s.life.leave()
	return p.s.publish(ctx, req, p.sp, p.etag, 0)
}

// Discard gives the spare back for reuse.
func (p *staged) Discard() {
	if !p.used.Swap(true) {
		p.release()
	}
}

// release returns the spare to the pool; once the store is closed it only
// closes the spare's file (the directory's descriptor may be gone, so its
// temp name is left for New to remove).
func (p *staged) release() {
	if p.s.life.enter() {
		p.s.spares.give(p.sp)
		p.s.life.leave()
		return
	}
	_ = p.sp.f.close()
}
