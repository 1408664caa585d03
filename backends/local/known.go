package local

import "sync"

// known is what the store last wrote or read at an object's file name:
// kept per lock stripe (read and written under its lock), so a
// conditional Put checks its ETag without reading the trailer. The store
// is the only writer of its directory.
type known struct {
	exists bool
	etag   string
	len    int64 // the object file's length
	// f is the file at the name, held open since this store wrote it
	// (nil: not held). When a replace swaps it out it becomes the next
	// write's spare without an open; counted in Store.held.
	f *wfile
}

const (
	// perStripe bounds the known versions kept per stripe: 256 stripes x
	// 128, about 8 MB at most; a key not kept costs one trailer read on its
	// next write.
	perStripe = 128
	// maxHeld bounds the object files held open between writes (known.f):
	// with the spares', the store holds at most maxHeld + maxSpares
	// descriptors besides its readers'. A write to a key whose file is not
	// held opens its spare once.
	maxHeld = 256
)

// stripe serializes the checks and swaps of the keys hashed to it
// (writers hold mu from the check through the directory fsync; readers
// hold it shared while they open a file, so they never see a swap whose
// directory fsync has not completed).
type stripe struct {
	mu    sync.RWMutex
	known map[string]known
}

// remember records k at name, under st's lock. An entry already there
// must hold no file (the caller took it with unhold or closed it with
// forget); an entry evicted to make room has its file closed.
func (s *Store) remember(st *stripe, name string, k known) {
	if st.known == nil {
		st.known = map[string]known{}
	}
	if _, ok := st.known[name]; !ok && len(st.known) >= perStripe {
		for n, old := range st.known { // any one: the next use reads it back
			s.drop(old.f)
			delete(st.known, n)
			break
		}
	}
	st.known[name] = k
}

// forget drops what is known at name, closing its file (under st's lock):
// after a failure, the next use reads the file back.
func (s *Store) forget(st *stripe, name string) {
	s.drop(st.known[name].f)
	delete(st.known, name)
}

// hold returns f to keep in a known entry, or nil (f closed) when maxHeld
// files are held already.
func (s *Store) hold(f *wfile) *wfile {
	if s.held.Add(1) > maxHeld {
		s.held.Add(-1)
		_ = f.close()
		return nil
	}
	return f
}

// unhold takes f out of a known entry (it becomes a spare's): no longer
// counted, still open.
func (s *Store) unhold(f *wfile) *wfile {
	if f != nil {
		s.held.Add(-1)
	}
	return f
}

// drop closes a held file.
func (s *Store) drop(f *wfile) {
	if f != nil {
		s.held.Add(-1)
		_ = f.close()
	}
}

// closeHeld closes every held file (Close).
func (s *Store) closeHeld() {
	for i := range s.stripes {
		st := &s.stripes[i]
		st.mu.Lock()
		for name, k := range st.known {
			s.drop(k.f)
			k.f = nil
			st.known[name] = k
		}
		st.mu.Unlock()
	}
}
