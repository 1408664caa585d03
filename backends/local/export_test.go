package local

// SetDirSync replaces the directory fsync of s (tests inject failures).
func SetDirSync(s *Store, sync func(dir string) error) { s.dirs.sync = sync }
