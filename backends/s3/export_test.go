package s3

// ViaSDK makes s send every write through the SDK's operation stack (the
// path a store without a put template takes), for tests and benchmarks
// comparing the two.
func ViaSDK(s *Store) *Store { s.tmpl = nil; return s }

// Direct reports whether s sends single presigned PUTs itself.
func Direct(s *Store) bool { return s.tmpl != nil }

// ProbeDir is where Probe writes its scratch keys, which List never shows.
const ProbeDir = probeDir
