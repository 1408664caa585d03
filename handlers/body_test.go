package handlers

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/spool"
)

func bodyServer(t *testing.T, limit, budget int64) *Server {
	t.Helper()
	return &Server{SpoolDir: t.TempDir(), bodies: spool.NewPool(limit, budget)}
}

func spoolFiles(t *testing.T, s *Server) int {
	t.Helper()
	es, err := os.ReadDir(s.SpoolDir)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

func spoolOf(t *testing.T, s *Server, body string, chunked bool, max int64) (*spool.Body, error) {
	t.Helper()
	r := httptest.NewRequest("PUT", "/v1/objects/x/y", strings.NewReader(body))
	if chunked {
		r.ContentLength = -1
	}
	return s.spool(r, max)
}

func wantBody(t *testing.T, sp *spool.Body, body string) {
	t.Helper()
	sum := sha256.Sum256([]byte(body))
	if sp.Size != int64(len(body)) || sp.Digest() != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("size %d digest %s, want %d and the body's SHA-256", sp.Size, sp.Digest(), len(body))
	}
	for range 2 { // forwarded, then re-read on a retry
		rs := sp.Reader()
		if _, err := rs.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rs)
		if err != nil || string(got) != body {
			t.Fatalf("body read back %q, %v; want %q", got, err, body)
		}
	}
	if kept, err := sp.Keep(1 << 20)(); err != nil || string(kept) != body {
		t.Fatalf("kept for quarantine %q, %v", kept, err)
	}
}

// TestSmallBodiesStayInMemoryLargeOnesAreSpooled: a body within the memory
// bound makes no spool file; one over it (declared or found while reading a
// chunked body) is spooled; each reads back whole with its digest.
func TestSmallBodiesStayInMemoryLargeOnesAreSpooled(t *testing.T) {
	s := bodyServer(t, 16, 64)
	small, err := spoolOf(t, s, "sixteen bytes!!!", false, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !small.InMemory() || spoolFiles(t, s) != 0 {
		t.Fatalf("a 16-byte body went to a file (%d files)", spoolFiles(t, s))
	}
	wantBody(t, small, "sixteen bytes!!!")
	small.Close()

	for _, chunked := range []bool{false, true} {
		big, err := spoolOf(t, s, "seventeen bytes!!", chunked, 100)
		if err != nil {
			t.Fatal(err)
		}
		if big.InMemory() || spoolFiles(t, s) != 1 {
			t.Fatalf("chunked=%v: a 17-byte body was not spooled", chunked)
		}
		wantBody(t, big, "seventeen bytes!!")
		big.Close()
		if n := spoolFiles(t, s); n != 0 {
			t.Fatalf("Close left %d spool files", n)
		}
	}
}

// TestMemoryBudgetSpoolsWhatDoesNotFit: bodies held at once never exceed the
// budget; a body that does not fit is spooled, and Close gives the budget back.
func TestMemoryBudgetSpoolsWhatDoesNotFit(t *testing.T) {
	s := bodyServer(t, 10, 20)
	a, _ := spoolOf(t, s, "0123456789", false, 100)
	b, _ := spoolOf(t, s, "0123456789", false, 100)
	c, err := spoolOf(t, s, "abc", false, 100)
	if err != nil || !a.InMemory() || !b.InMemory() || c.InMemory() {
		t.Fatalf("two bodies of 10 in a budget of 20, then a third: mem %v %v, third spooled %v (%v)", a.InMemory(), b.InMemory(), c != nil && !c.InMemory(), err)
	}
	wantBody(t, c, "abc")
	a.Close()
	c.Close()
	d, _ := spoolOf(t, s, "abc", true, 100) // unknown length holds the whole bound
	if !d.InMemory() {
		t.Fatal("after a Close the budget was not given back")
	}
	d.Close()
	b.Close()
}

// TestReleasedBodyCannotBeRead: a reader kept past the request (an HTTP
// transport may read after its round trip) gets an error, never the bytes
// of the buffer's next use.
func TestReleasedBodyCannotBeRead(t *testing.T) {
	s := bodyServer(t, 16, 64)
	sp, _ := spoolOf(t, s, "secret", false, 100)
	r := sp.Reader()
	sp.Close()
	next, _ := spoolOf(t, s, "other!", false, 100)
	defer next.Close()
	if n, err := r.Read(make([]byte, 16)); err == nil || n != 0 {
		t.Fatalf("read of a released body: %d bytes, %v", n, err)
	}
}

// TestBodyOverTheLimitIsRefused: in memory or spooled, a body over max is
// INVALID_REQUEST and leaves no file behind.
func TestBodyOverTheLimitIsRefused(t *testing.T) {
	for _, limit := range []int64{16, -1} {
		s := bodyServer(t, limit, 64)
		for _, chunked := range []bool{false, true} {
			_, err := spoolOf(t, s, "0123456789abc", chunked, 8)
			if fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest {
				t.Fatalf("memory bound %d chunked %v: %v, want INVALID_REQUEST", limit, chunked, err)
			}
			if n := spoolFiles(t, s); n != 0 {
				t.Fatalf("refused body left %d files", n)
			}
		}
	}
}
