package local

// SetDirSync replaces the directory fsync of s (tests inject failures).
func SetDirSync(s *Store, sync func(dir string) error) { s.dirs.sync = sync }

// Syncs reports the object-file and directory fsyncs s has run.
func Syncs(s *Store) (file, dir uint64) {
	s.dirs.mu.Lock()
	defer s.dirs.mu.Unlock()
	return s.fileSyncs.Load(), s.dirs.syncs
}
