package s3door_test

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Rule: a signed aws-chunked body is buffered as its bytes arrive, not by
// the size a chunk's header announces: a request announcing a 16 MiB chunk
// and sending ten bytes of it allocates nowhere near 16 MiB (it did, at
// once, so that a few dozen stalled connections pinned gigabytes outside
// the Bodies budget), and is refused as an incomplete body.
func TestASignedChunkIsBufferedAsItArrivesNotAsAnnounced(t *testing.T) {
	e := newEnv(t, nil)
	e.lease("AKIDA", owner, "b/r")
	before := e.fingerprint("b/r")
	req, _ := e.signed(t, "AKIDA", "/b/r/announced", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
		map[string]string{"Content-Encoding": "aws-chunked"}, "", time.Now())
	body := fmt.Sprintf("%x;chunk-signature=%064x\r\n0123456789", 16<<20, 0)
	req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	runtime.ReadMemStats(&m1)
	if resp.StatusCode != 400 || !strings.Contains(string(out), "IncompleteBody") {
		t.Fatalf("a chunk cut short: %d %s, want 400 IncompleteBody", resp.StatusCode, out)
	}
	if grew := m1.TotalAlloc - m0.TotalAlloc; grew > 4<<20 {
		t.Fatalf("a request announcing a 16 MiB chunk and sending 10 bytes allocated %d KiB", grew>>10)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a chunk cut short changed state")
	}
}
