package s3

import (
	"net"
	"syscall"
)

// resetOnClose has every connection to the store reset, not shut down in
// order, when it is closed (SO_LINGER with a zero timeout). A write is cut
// off at its landing deadline by cancelling its request, which closes the
// connection; an orderly close would still deliver the body bytes already
// in the kernel's send buffer (megabytes), and the store, which checked the
// presigned URL's expiry when the headers arrived, would take the write
// however late they reach it. A reset discards them, so a body still in
// flight at the deadline does not complete (landby.go). Connections the
// transport closes idle lose nothing by it.
func resetOnClose(d *net.Dialer) {
	prev := d.Control
	d.Control = func(network, address string, c syscall.RawConn) error {
		if prev != nil {
			if err := prev(network, address, c); err != nil {
				return err
			}
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = setLingerZero(fd)
		}); err != nil {
			return err
		}
		return serr
	}
}
