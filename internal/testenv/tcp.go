package testenv

import (
	"net"
	"testing"
)

// ServeTCP listens on a loopback port for t and runs serve on every
// connection it accepts, each in its own goroutine, closing the connection
// when serve returns; the listener closes when t ends. It returns the
// listener's host:port: a raw TCP peer (an echo server, an upstream that
// answers by hand) for tests.
func ServeTCP(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}
