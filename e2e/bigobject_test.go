package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// genBody is a deterministic body of n bytes generated on the fly: a
// pseudo-random block of a prime-ish length repeated, never held whole.
type genBody struct {
	pos, n int64
	block  []byte
}

func newGenBody(n int64) *genBody {
	block := make([]byte, 1<<20+7)
	r := rand.New(rand.NewChaCha8([32]byte{7}))
	for i := range block {
		block[i] = byte(r.Uint32())
	}
	return &genBody{n: n, block: block}
}

func (g *genBody) Read(p []byte) (int, error) {
	if g.pos >= g.n {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), g.n-g.pos)]
	n := 0
	for n < len(p) {
		n += copy(p[n:], g.block[(g.pos+int64(n))%int64(len(g.block)):])
	}
	g.pos += int64(n)
	return n, nil
}

// rssSampler samples a process's resident set size (VmRSS) until stopped.
type rssSampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	peak int64
}

func sampleRSS(t *testing.T, pid int) *rssSampler {
	t.Helper()
	if _, err := procStatus(pid, "VmRSS"); err != nil {
		t.Fatalf("cannot read the gateway's memory use: %v", err)
	}
	s := &rssSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if v, err := procStatus(pid, "VmRSS"); err == nil {
				s.mu.Lock()
				s.peak = max(s.peak, v)
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// Peak stops sampling and returns the largest sample.
func (s *rssSampler) Peak() int64 {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// procStatus reads a "kB" field of /proc/PID/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// TestOneGiBObjectPassesWithFlatMemory streams a 1 GiB generated body (128 MiB
// with -short) through the binary to the S3 store while sampling the gateway
// process's resident memory: the peak stays far below the object's size, the
// object lands whole with its digest, and reading it back streams too. A body
// whose Content-Digest or x-amz-checksum-sha256 does not match is refused and
// writes nothing.
func TestOneGiBObjectPassesWithFlatMemory(t *testing.T) {
	size := int64(1 << 30)
	if testing.Short() {
		size = 128 << 20
	}
	const memLimit = 256 << 20
	b := newS3Bucket(t)
	dataDir := t.TempDir()
	// Query mode: the gateway checks the lease with the registry when it admits
	// the write, after the body has been spooled. In proof mode a status proof
	// (5 s life) can expire during a long upload, and this is a memory test,
	// not a race against the clock.
	p := startGatewayEnv(t, b.env(), "dev", "--data-dir", dataDir, "--status-mode", "query",
		"--identity", "worker-a=token-a", "--store", "s3a="+b.storeURL(""))
	pid := p.cmd.Process.Pid
	idle, _ := procStatus(pid, "VmRSS")
	l := p.acquire(t, "token-a", "s3a/big", "big-1", "big-op", 600_000)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := sha256.New()
	req, err := http.NewRequestWithContext(ctx, "PUT", p.base+"/v1/objects/s3a/big/obj", io.TeeReader(newGenBody(size), h))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	for k, v := range fenceHeaders(l, 1) {
		req.Header.Set(k, v)
	}
	req.Header.Set("Authorization", "Bearer token-a")
	rss := sampleRSS(t, pid)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		rss.Peak()
		t.Fatalf("upload: %v", err)
	}
	respBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	upload := time.Since(start)
	peakUp := rss.Peak()
	hwm, _ := procStatus(pid, "VmHWM")
	t.Logf("upload of %d MiB: %s; gateway RSS idle %d MiB, peak sampled %d MiB, high-water mark %d MiB",
		size>>20, upload.Round(time.Millisecond), idle>>20, peakUp>>20, hwm>>20)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload answered %d %s", resp.StatusCode, respBody)
	}
	if peakUp >= memLimit || hwm >= memLimit {
		t.Fatalf("gateway memory peaked at %d MiB (high-water %d MiB) for a %d MiB object; want < %d MiB",
			peakUp>>20, hwm>>20, size>>20, memLimit>>20)
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	rc := receiptOf(t, answer{status: resp.StatusCode, body: respBody})
	if rc.State != "COMMITTED" || rc.PayloadDigest != digest {
		t.Fatalf("receipt %+v, want COMMITTED with payload digest %s", rc, digest)
	}
	head := b.head(t, "big/obj")
	if head == nil || aws.ToInt64(head.ContentLength) != size || aws.ToString(head.ETag) != rc.Version {
		t.Fatalf("S3 object: %+v, want %d bytes with ETag %s", head, size, rc.Version)
	}
	requireEffectMeta(t, head.Metadata, rc)
	if left, _ := filepath.Glob(filepath.Join(dataDir, "spool", "*")); len(left) != 0 {
		t.Fatalf("spooled bodies left behind: %v", left)
	}

	// Read it back through the gateway: the same bytes, streamed.
	get, err := http.NewRequestWithContext(ctx, "GET", p.base+"/v1/objects/s3a/big/obj", nil)
	if err != nil {
		t.Fatal(err)
	}
	get.Header.Set("Authorization", "Bearer token-a")
	rss = sampleRSS(t, pid)
	start = time.Now()
	gr, err := http.DefaultClient.Do(get)
	if err != nil {
		rss.Peak()
		t.Fatal(err)
	}
	back := sha256.New()
	n, err := io.Copy(back, gr.Body)
	gr.Body.Close()
	peakDown := rss.Peak()
	t.Logf("download: %s; gateway RSS peak %d MiB", time.Since(start).Round(time.Millisecond), peakDown>>20)
	if err != nil || gr.StatusCode != http.StatusOK || n != size || "sha256:"+hex.EncodeToString(back.Sum(nil)) != digest {
		t.Fatalf("read back %d bytes (status %d, err %v); want %d bytes with digest %s", n, gr.StatusCode, err, size, digest)
	}
	if peakDown >= memLimit {
		t.Fatalf("gateway memory peaked at %d MiB while serving the object", peakDown>>20)
	}

	// A body that does not match its declared digest is refused; nothing is written.
	const small = 1 << 20
	wrong := base64.StdEncoding.EncodeToString(make([]byte, sha256.Size))
	for _, hdr := range []map[string]string{
		{"Content-Digest": "sha-256=:" + wrong + ":"},
		{"x-amz-checksum-sha256": wrong},
	} {
		a := putStream(t, p, l, "s3a/big/bad", 2, newGenBody(small), hdr)
		wantCode(t, a, http.StatusBadRequest, "INVALID_REQUEST")
		if b.head(t, "big/bad") != nil {
			t.Fatalf("a body refused for its digest (%v) was written to S3", hdr)
		}
	}
	at := p.do(t, "GET", fmt.Sprintf("/v1/receipts?resource=s3a/big&fence=%d&segment=2", l.fence), "token-a", nil, "")
	if res := p.do(t, "GET", "/v1/resources/s3a/big", "token-a", nil, ""); res.num("lastSegmentSeq") != 1 || !strings.Contains(string(at.body), `"receipts":[]`) {
		t.Fatalf("refused bodies changed fence state: resource %s, receipts at segment 2 %s", res.body, at.body)
	}
	// The same body with its right digest is accepted as segment 2.
	sum := sha256.New()
	_, _ = io.Copy(sum, newGenBody(small))
	right := base64.StdEncoding.EncodeToString(sum.Sum(nil))
	ok := putStream(t, p, l, "s3a/big/bad", 2, newGenBody(small), map[string]string{"Content-Digest": "sha-256=:" + right + ":"})
	if ok.status != http.StatusOK || ok.str("state") != "COMMITTED" {
		t.Fatalf("body with its right Content-Digest: %d %s", ok.status, ok.body)
	}
	if h := b.head(t, "big/bad"); h == nil || aws.ToInt64(h.ContentLength) != small {
		t.Fatalf("S3 object big/bad after the accepted write: %+v", h)
	}
	if left, _ := filepath.Glob(filepath.Join(dataDir, "spool", "*")); len(left) != 0 {
		t.Fatalf("spooled bodies left behind: %v", left)
	}
}

// putStream is put with a streamed body and extra headers.
func putStream(t *testing.T, p *gatewayProc, l lease, key string, seg int, body io.Reader, hdr map[string]string) answer {
	t.Helper()
	all := fenceHeaders(l, seg)
	for k, v := range hdr {
		all[k] = v
	}
	return p.send(t, time.Minute, "PUT", "/v1/objects/"+key, "token-a", all, body)
}
