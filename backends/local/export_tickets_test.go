package local

// Tickets reports the writers registered with the directory syncer
// (Enter) and not yet ended (Sync or Leave).
func Tickets(s *Store) int {
	s.dirs.mu.Lock()
	defer s.dirs.mu.Unlock()
	return len(s.dirs.writing)
}
