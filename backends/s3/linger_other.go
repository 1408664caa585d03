//go:build !unix

package s3

// setLingerZero does nothing where the socket option is not at hand.
func setLingerZero(uintptr) error { return nil }
