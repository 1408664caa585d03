package local

// ExchangeUnsupported reports whether the store found that the filesystem
// refuses renameat2's flags (RENAME_EXCHANGE), and so replaces without
// swapping the old file out as a spare.
func ExchangeUnsupported() bool { return noRenameat2.Load() }
