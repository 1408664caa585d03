package spool_test

import (
	"crypto/md5"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/spool"
)

func files(t *testing.T, dir string) int {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// TestOnePoolIsOneBudgetForEveryReader: bodies read through one pool by
// different readers (the REST handlers and the S3 front door share one)
// count against one budget; Close gives it back.
func TestOnePoolIsOneBudgetForEveryReader(t *testing.T) {
	dir := t.TempDir()
	p := spool.NewPool(10, 20)
	a, err := p.Read(dir, strings.NewReader("0123456789"), 10, 100)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Read(dir, strings.NewReader("0123456789"), -1, 100) // unknown length holds the whole bound
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Read(dir, strings.NewReader("abc"), 3, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !a.InMemory() || !b.InMemory() || c.InMemory() || files(t, dir) != 1 {
		t.Fatalf("budget 20, bodies of 10, 10, 3: in memory %v %v %v, %d files", a.InMemory(), b.InMemory(), c.InMemory(), files(t, dir))
	}
	a.Close()
	c.Close()
	d, _ := p.Read(dir, strings.NewReader("abc"), 3, 100)
	if !d.InMemory() || files(t, dir) != 0 {
		t.Fatalf("after Close: in memory %v, %d files", d.InMemory(), files(t, dir))
	}
	d.Close()
	b.Close()
}

// TestDigestAndAlsoHashesInOnePass: the SHA-256 and every extra hash see
// the same bytes, read once; the body reads back whole from memory or file.
func TestDigestAndAlsoHashesInOnePass(t *testing.T) {
	for _, p := range []*spool.Pool{spool.NewPool(1<<10, 1<<20), nil} {
		m := md5.New()
		body := strings.Repeat("x", 100)
		b, err := p.Read(t.TempDir(), strings.NewReader(body), int64(len(body)), 1000, m)
		if err != nil {
			t.Fatal(err)
		}
		sum, msum := sha256.Sum256([]byte(body)), md5.Sum([]byte(body))
		if string(b.SHA256) != string(sum[:]) || string(m.Sum(nil)) != string(msum[:]) || b.Size != 100 {
			t.Fatalf("pool %v: size %d, digests differ from the body's", p != nil, b.Size)
		}
		got, err := io.ReadAll(b.Reader())
		if err != nil || string(got) != body {
			t.Fatalf("pool %v: read back %q, %v", p != nil, got, err)
		}
		b.Close()
	}
}

// TestCopyAlwaysSpoolsToAFile: Copy (parts that are staged by renaming
// their file, the assembled multipart object) never holds a body in memory.
func TestCopyAlwaysSpoolsToAFile(t *testing.T) {
	dir := t.TempDir()
	b, err := spool.Copy(dir, strings.NewReader("tiny"), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.InMemory() || b.File() == nil || files(t, dir) != 1 {
		t.Fatalf("Copy: in memory %v, file %v, %d files", b.InMemory(), b.File() != nil, files(t, dir))
	}
}

// TestMaxBytesReaderCutIsInvalidRequest: a body an http.MaxBytesReader cut
// (the handlers' bound, which also ends the connection) is refused like one
// over max, and leaves nothing behind.
func TestMaxBytesReaderCutIsInvalidRequest(t *testing.T) {
	for _, p := range []*spool.Pool{spool.NewPool(4, 64), spool.NewPool(64, 64), nil} {
		dir := t.TempDir()
		r := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader("0123456789abc")), 8)
		_, err := p.Read(dir, r, -1, 100)
		if fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest || !strings.Contains(err.Error(), "limit of 8 bytes") {
			t.Fatalf("%v, want INVALID_REQUEST naming the limit of 8 bytes", err)
		}
		if n := files(t, dir); n != 0 {
			t.Fatalf("refused body left %d files", n)
		}
	}
}

// TestSmallBodyIsReadWithoutACopyBuffer: a body that fits the pool is read
// straight into the pool's buffer (no 32 KiB io.Copy buffer per body), so a
// 1 KiB write allocates a small fraction of that; the bytes and digest are
// the body's.
func TestSmallBodyIsReadWithoutACopyBuffer(t *testing.T) {
	p := spool.NewPool(1<<20, 64<<20)
	body := strings.Repeat("0123456789abcdef", 64)
	sum := sha256.Sum256([]byte(body))
	read := func() {
		b, err := p.Read(t.TempDir(), strings.NewReader(body), int64(len(body)), 1<<20)
		if err != nil || !b.InMemory() || string(b.SHA256) != string(sum[:]) {
			t.Fatalf("read: %v, in memory %v", err, b != nil && b.InMemory())
		}
		b.Close()
	}
	read() // the pool's buffer is made once
	var before, after runtime.MemStats
	const n = 100
	runtime.ReadMemStats(&before)
	for range n {
		b, _ := p.Read("", strings.NewReader(body), int64(len(body)), 1<<20)
		b.Close()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 4<<10 {
		t.Fatalf("%d bytes allocated per 1 KiB body read into memory", per)
	}
}

// TestKeepAfterCloseIsAnErrorNotAPanic: a fence store's batch may read a
// quarantine payload (Keep) for a write whose request gave up and closed
// its body meanwhile; the read is an error, never a panic, never another
// body's bytes, and it does not race Close (go test -race).
func TestKeepAfterCloseIsAnErrorNotAPanic(t *testing.T) {
	dir := t.TempDir()
	p := spool.NewPool(16, 64)
	for _, name := range []string{"memory", "file"} {
		var b *spool.Body
		var err error
		if name == "memory" {
			b, err = p.Read(dir, strings.NewReader("payload"), 7, 100)
		} else {
			b, err = spool.Copy(dir, strings.NewReader("payload"), 100)
		}
		if err != nil {
			t.Fatal(err)
		}
		keep := b.Keep(100)
		done := make(chan struct{})
		go func() { defer close(done); _, _ = keep() }() // races Close below
		b.Close()
		<-done
		if got, err := keep(); err == nil || got != nil {
			t.Fatalf("%s: Keep after Close: %q %v, want an error", name, got, err)
		}
		other, _ := p.Read(dir, strings.NewReader("another"), 7, 100) // may reuse the buffer
		if got, _ := keep(); got != nil {
			t.Fatalf("%s: Keep after Close read %q", name, got)
		}
		other.Close()
	}
}
