package local

import (
	"context"

	"github.com/fencegate/fencegate"
)

// Put writes the object if its condition holds. The body goes into a spare
// file first (writeSpare); only the check, the swap and the directory fsync
// happen under the key's lock (see the package doc for each step's crash
// guarantee).
func (s *Store) Put(ctx context.Context, req fencegate.PutRequest) (string, error) {
	if err := req.Validate(); err != nil {
		return "", err
	}
	if !s.life.enter() {
		return "", s.closedErr("put", req.Key)
	}
	defer s.life.leave()
	sp, etag, ticket, err := s.writeSpare(ctx, req, true)
	if err != nil {
		return "", err
	}
	return s.publish(ctx, req, sp, etag, ticket)
}

// publish is a Put's steps 2 to 4 for the filled spare sp (its write's
// ETag etag, its directory-sync ticket ticket, 0 for none): under the key's
// lock the condition, the swap and the shared directory fsync, then the
// replaced file kept as the next spare. sp is
// swapped in, given back or discarded, whatever the answer.
func (s *Store) publish(ctx context.Context, req fencegate.PutRequest, sp spare, etag string, ticket uint64) (string, error) {
	name, st := s.slot(req.Key)
	if !st.mu.TryLock() {
		// Another writer of the stripe holds it, maybe through a
		// directory fsync that is gathering for this ticket: end it first.
		s.dirs.Leave(ticket)
		ticket = 0
		st.mu.Lock()
	}
	defer st.mu.Unlock()
	cur, err := s.current(st, name)
	if err != nil {
		s.dirs.Leave(ticket)
		s.spares.give(sp)
		return "", s.unavailable(err, "read", req.Key)
	}
	if err := s.landable(ctx, cur, req); err != nil {
		s.dirs.Leave(ticket)
		s.spares.give(sp) // never swapped in: still a spare
		return "", err
	}
	swapped := false
	if cur.exists {
		swapped, err = s.d.exchange(sp.name, name)
	} else {
		err = s.d.renameNew(sp.name, name)
	}
	if err != nil {
		s.dirs.Leave(ticket)
		s.forget(st, name)
		s.spares.discard(sp)
		return "", s.unavailable(err, "replace", req.Key)
	}
	if err := s.dirs.Sync(ticket); err != nil {
		// The object is in place but may not survive a crash: no definite
		// answer. Head and Get answer only once a directory fsync succeeds
		// (Durable), so reading the object back proves nothing before that.
		// The old file (under the temp name if swapped) is not reused: its
		// move there is not known to be durable.
		s.forget(st, name)
		_ = sp.f.close()
		return "", s.unavailable(err, "sync directory for", req.Key)
	}
	old := s.unhold(cur.f) // the replaced file: under sp.name if swapped, else freed
	s.remember(st, name, known{exists: true, etag: etag, len: sp.len, f: s.hold(sp.f)})
	switch {
	case swapped && cur.len <= maxSpareLen && !s.pins.pinned(name):
		s.spares.give(spare{name: sp.name, f: old, len: cur.len})
	case swapped:
		s.spares.discard(spare{name: sp.name, f: old}) // a reader's open file lives on
	case old != nil:
		_ = old.close()
	}
	return etag, nil
}

// landable checks a Put's condition against cur, then its context and its
// landing deadline, right before the swap.
func (s *Store) landable(ctx context.Context, cur known, req fencegate.PutRequest) error {
	switch {
	case !cur.exists:
		if req.IfMatch != "" {
			return preconditionFailed(s.name, req.Key, "If-Match "+req.IfMatch)
		}
	case req.IfNoneMatch:
		return preconditionFailed(s.name, req.Key, "If-None-Match: *")
	case cur.etag != req.IfMatch:
		return preconditionFailed(s.name, req.Key, "If-Match "+req.IfMatch)
	}
	if err := ctx.Err(); err != nil {
		return cancelled(err, "put")
	}
	return s.expired(ctx, "put", req.Key)
}

// cancelled answers an op whose context ended before it was applied
// (nothing changed): BACKEND_UNAVAILABLE, wrapping the context's error.
func cancelled(err error, op string) error {
	return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, op+" cancelled before it was applied")
}

// Delete removes the object if its ETag equals ifMatch. A different ETag, or
// no object at all (If-Match on a missing key does not hold, as S3 answers
// it), fails with cause ErrPreconditionFailed, never NOT_FOUND: the
// gateway's ObjectDelete reads the key after a failed condition and finds
// the state it asked for.
func (s *Store) Delete(ctx context.Context, key, ifMatch string) error {
	if err := fencegate.CheckName(key); err != nil {
		return err
	}
	if !s.life.enter() {
		return s.closedErr("delete", key)
	}
	defer s.life.leave()
	if ifMatch == "" {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "delete of %q needs If-Match", key)
	}
	if err := ctx.Err(); err != nil {
		return cancelled(err, "delete")
	}
	name, st := s.slot(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	cur, err := s.current(st, name)
	switch {
	case err != nil:
		return s.unavailable(err, "read", key)
	case !cur.exists: // If-Match on a missing key does not hold
		return preconditionFailed(s.name, key, "If-Match "+ifMatch+" on a missing key")
	case cur.etag != ifMatch:
		return preconditionFailed(s.name, key, "If-Match "+ifMatch)
	}
	if err := s.expired(ctx, "delete", key); err != nil {
		return err
	}
	if err := s.d.remove(name); err != nil {
		s.forget(st, name)
		return s.unavailable(err, "delete", key)
	}
	s.forget(st, name) // its file is unlinked
	if err := s.dirs.Sync(0); err != nil {
		return s.unavailable(err, "sync directory for", key)
	}
	s.remember(st, name, known{})
	return nil
}
