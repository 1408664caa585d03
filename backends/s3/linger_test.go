package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
)

// Rule: a write to the store cancelled mid-body (at its landing deadline)
// resets its connection, so the store reads a reset, not the rest of the
// body the kernel had buffered followed by an orderly end (which a store
// that checked the presigned expiry at the headers would take, however
// late).
func TestACancelledWriteResetsItsConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+ln.Addr().String()+"/b/k", bytes.NewReader(make([]byte, 64<<20)))
	done := make(chan error, 1)
	go func() {
		resp, err := pooled(nil).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	conn := <-accepted
	defer conn.Close()
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil { // the request is under way
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled write was answered")
	}
	_, err = io.Copy(io.Discard, conn)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the store read the cancelled write's connection to %v, want a reset (ECONNRESET)", err)
	}
}
