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
// a listing shows only durable objects and never a reused file.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]fencegate.ObjectInfo, bool, error) {
	if !s.life.enter() {
		return nil, false, s.closedErr("list", prefix)
	}
	defer s.life.leave()
	if err := s.dirs.Durable(); err != nil {
		return nil, false, s.unavailable(err, "sync directory before listing", prefix)
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, false, s.unavailable(err, "list", prefix)
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
