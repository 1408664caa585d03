package local

import (
	"context"
	"os"
	"path/filepath"

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
	name, st := s.slot(req.Key)
	sp, etag, err := s.writeSpare(ctx, req)
	if err != nil {
		return "", err
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	cur, err := s.current(st, name)
	if err != nil {
		s.spares.give(sp)
		return "", s.unavailable(err, "read", req.Key)
	}
	if err := s.landable(ctx, cur, req); err != nil {
		s.spares.give(sp) // never swapped in: still a spare
		return "", err
	}
	path := filepath.Join(s.dir, name)
	swapped := false
	if cur.exists {
		swapped, err = exchange(sp.path, path)
	} else {
		err = renameNew(sp.path, path)
	}
	if err != nil {
		delete(st.known, name)
		_ = os.Remove(sp.path)
		return "", s.unavailable(err, "replace", req.Key)
	}
	if err := s.dirs.Sync(); err != nil {
		// The object is in place but may not survive a crash: no definite
		// answer. Head and Get answer only once a directory fsync succeeds
		// (Durable), so reading the object back proves nothing before that.
		// The old file (under the temp name if swapped) is not reused: its
		// move there is not known to be durable.
		delete(st.known, name)
		return "", s.unavailable(err, "sync directory for", req.Key)
	}
	st.remember(name, known{exists: true, etag: etag, len: sp.len})
	if swapped {
		if cur.len <= maxSpareLen && !s.pins.pinned(name) {
			s.spares.give(spare{path: sp.path, len: cur.len})
		} else {
			_ = os.Remove(sp.path) // a reader's open file lives on
		}
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
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "put cancelled before it was applied")
	}
	return s.expired(ctx, "put", req.Key)
}

// Delete removes the object if its ETag equals ifMatch. NOT_FOUND if it does
// not exist; a different ETag fails with cause ErrPreconditionFailed.
func (s *Store) Delete(ctx context.Context, key, ifMatch string) error {
	if err := fencegate.CheckName(key); err != nil {
		return err
	}
	if ifMatch == "" {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "delete of %q needs If-Match", key)
	}
	if err := ctx.Err(); err != nil {
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "delete cancelled before it was applied")
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
	if err := os.Remove(filepath.Join(s.dir, name)); err != nil {
		delete(st.known, name)
		return s.unavailable(err, "delete", key)
	}
	if err := s.dirs.Sync(); err != nil {
		delete(st.known, name)
		return s.unavailable(err, "sync directory for", key)
	}
	st.remember(name, known{})
	return nil
}
