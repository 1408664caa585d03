package local

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"sort"
	"strings"

	"github.com/fencegate/fencegate"
)

var _ fencegate.ObjectLister = (*Store)(nil)

// List returns the objects whose keys start with prefix and sort after
// after, in key order. File names are hashes, so it reads every object's
// trailer: a listing costs one small read per object in the store. Each
// file is read as Head reads it (under its key's shared lock, pinned), so
// a listing shows only durable objects and never a reused file; and it
// leaves a deleted object out only once its Delete's unlink is durable, as
// Head answers NOT_FOUND only then (awaitWriters).
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]fencegate.ObjectInfo, bool, error) {
	if !s.life.enter() {
		return nil, false, s.closedErr("list", prefix)
	}
	defer s.life.leave()
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, false, s.unavailable(err, "list", prefix)
	}
	s.awaitWriters()
	if err := s.dirs.Durable(); err != nil {
		return nil, false, s.unavailable(err, "sync directory before listing", prefix)
	}
	var all []fencegate.ObjectInfo
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, false, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "list cancelled")
		}
		b, err := hex.DecodeString(e.Name())
		if strings.HasPrefix(e.Name(), tmpPrefix) || e.IsDir() || err != nil || len(b) == 0 {
			continue
		}
		f, tr, err := s.openPinned(&s.stripes[b[0]], e.Name())
		var ud unsynced
		if errors.As(err, &ud) {
			return nil, false, s.unavailable(ud.err, "sync directory before listing", prefix)
		}
		if err != nil {
			continue // removed or replaced meanwhile
		}
		f.Close()
		s.pins.unpin(e.Name())
		if strings.HasPrefix(tr.Key, prefix) && tr.Key > after {
			all = append(all, info(tr))
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Key < all[j].Key })
	if limit >= 0 && len(all) > limit {
		return all[:limit], true, nil
	}
	return all, false, nil
}

// awaitWriters waits once for each stripe's writer, if any. A writer holds
// its stripe's lock from its change of the directory (a Delete's unlink, a
// Put's rename) through the directory fsync that makes it durable, and
// records a failed fsync before it lets go; so once every stripe has been
// free after a ReadDir, each change that listing shows has either been
// synced or left the directory unsynced, which dirSyncer.Durable then
// syncs afresh (or reports). It takes one stripe at a time and holds none,
// so it waits for at most the writers that were in their fsync.
func (s *Store) awaitWriters() {
	for i := range s.stripes {
		mu := &s.stripes[i].mu
		if !mu.TryRLock() {
			if f := s.onListWait; f != nil {
				f()
			}
			mu.RLock()
		}
		mu.RUnlock()
	}
}
