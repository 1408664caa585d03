//go:build !linux

package local

// ExchangeUnsupported reports that this platform has no RENAME_EXCHANGE.
func ExchangeUnsupported() bool { return true }
