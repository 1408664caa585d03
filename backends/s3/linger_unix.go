//go:build unix

package s3

import "syscall"

// setLingerZero sets SO_LINGER {on, 0} on the socket fd.
func setLingerZero(fd uintptr) error {
	return syscall.SetsockoptLinger(int(fd), syscall.SOL_SOCKET, syscall.SO_LINGER, &syscall.Linger{Onoff: 1, Linger: 0})
}
