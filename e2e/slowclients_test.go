package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// openFiles counts the process's open file descriptors (/proc/PID/fd).
func openFiles(t *testing.T, p *gatewayProc) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.cmd.Process.Pid))
	if err != nil {
		t.Fatalf("cannot count the gateway's open files: %v", err)
	}
	return len(ents)
}

// slowGateway starts gateway dev with the given http: limits section.
func slowGateway(t *testing.T, limits string) *gatewayProc {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(cfg, []byte("http:\n"+limits), 0o600); err != nil {
		t.Fatal(err)
	}
	return startGateway(t, "dev", "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
		"--identity", "worker-a=token-a", "--identity", "worker-b=token-b")
}

// slowSocket opens a connection and sends only the start of a request.
func slowSocket(t *testing.T, addr, start string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, start); err != nil {
		t.Fatal(err)
	}
	return c
}

// readToClose reads an answer (if any) and then the connection's end; it
// reports the answer's status (0 for none) or an error if the connection is
// still open at the deadline.
func readToClose(c net.Conn, within time.Duration) (int, error) {
	_ = c.SetReadDeadline(time.Now().Add(within))
	br := bufio.NewReader(c)
	status := 0
	if _, err := br.Peek(1); err == nil {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		status = resp.StatusCode
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return status, fmt.Errorf("connection not closed after status %d: %v", status, err)
	}
	return status, nil
}

const (
	slowHeaderStart = "POST /v1/leases HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer token-a\r\n"
	slowBodyStart   = "POST /v1/leases HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer token-a\r\n" +
		"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"resource\":\"local/slow\""
)

// TestThreeHundredSlowSocketsDoNotStopOthersAndRefusalsAnswerAtOnce holds
// 300 sockets against the binary, with timeouts far longer than the test:
// 100 trickling headers, 100 trickling an acquisition's body, and 100
// requests refused before their body is needed (no credential, a forged
// grant) whose bodies never come. The refusals are answered at once and
// their connections closed (not drained: the body would never come); the
// gateway answers other clients meanwhile; its open files stay bounded by
// the sockets held; the refused writes changed nothing.
func TestThreeHundredSlowSocketsDoNotStopOthersAndRefusalsAnswerAtOnce(t *testing.T) {
	p := slowGateway(t, "  readHeaderTimeout: 10m\n  bodyReadTimeout: 10m\n")
	addr := strings.TrimPrefix(p.base, "http://")
	base := openFiles(t, p)
	t.Logf("start %s", time.Now().Format(time.StampMilli))
	var held []net.Conn
	for range 100 {
		held = append(held, slowSocket(t, addr, slowHeaderStart))
		held = append(held, slowSocket(t, addr, slowBodyStart))
	}
	var refused []net.Conn
	for i := range 100 {
		start := "POST /v1/leases HTTP/1.1\r\nHost: gw\r\nContent-Length: 1000\r\n\r\n"
		if i%2 == 1 {
			start = fmt.Sprintf("PUT /v1/objects/local/refused/%d HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer token-a\r\n"+
				"Fence-Grant: forged.grant.token\r\nFence-Status: x\r\nFence-Segment: 1\r\nContent-Length: 1000\r\n\r\n", i)
		}
		refused = append(refused, slowSocket(t, addr, start))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(refused))
	for _, c := range refused {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, err := readToClose(c, 60*time.Second)
			if err == nil && status != http.StatusUnauthorized {
				err = fmt.Errorf("refusal answered %d", status)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	t.Logf("refusals answered and closed at %s", time.Now().Format(time.StampMilli))
	// The gateway answers others while 200 sockets are held.
	if r := p.do(t, "GET", "/healthz", "", nil, ""); r.status != 200 {
		t.Fatalf("healthz while held: %d %s", r.status, r.body)
	}
	l := p.acquire(t, "token-b", "local/other", "b-1", "op-slow", 30000)
	if r := p.put(t, "token-b", l, "local/other", 1, "B"); r.status != 200 {
		t.Fatalf("write while held: %d %s", r.status, r.body)
	}
	if n := openFiles(t, p); n > base+len(held)+40 {
		t.Fatalf("open files %d with %d sockets held (baseline %d)", n, len(held), base)
	}
	// The refused writes stored nothing.
	for i := 1; i < 100; i += 2 {
		wantCode(t, p.do(t, "GET", fmt.Sprintf("/v1/resources/local/refused/%d", i), "token-a", nil, ""), http.StatusNotFound, "NOT_FOUND")
	}
	t.Logf("open files: baseline %d, with %d slow sockets held %d", base, len(held), openFiles(t, p))
}

// TestSlowHeadersAndBodiesAreCutOffAndFilesReturn: with short header and
// body read timeouts, 300 trickling sockets are all closed by the gateway
// (a stalled body is refused with INVALID_REQUEST first), its open file
// count returns to where it was, and the stalled acquisitions left no lease.
func TestSlowHeadersAndBodiesAreCutOffAndFilesReturn(t *testing.T) {
	p := slowGateway(t, "  readHeaderTimeout: 1s\n  bodyReadTimeout: 1s\n")
	addr := strings.TrimPrefix(p.base, "http://")
	base := openFiles(t, p)
	var conns []net.Conn
	for range 150 {
		conns = append(conns, slowSocket(t, addr, slowHeaderStart), slowSocket(t, addr, slowBodyStart))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(conns))
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, err := readToClose(c, 2*time.Minute)
			switch {
			case err != nil:
				errs <- err
			case i%2 == 0 && status != 0 && status != http.StatusRequestTimeout:
				errs <- fmt.Errorf("slow headers answered %d", status)
			case i%2 == 1 && status != http.StatusBadRequest:
				errs <- fmt.Errorf("stalled body answered %d, want 400", status)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := openFiles(t, p)
	for deadline := time.Now().Add(30 * time.Second); n > base+8 && time.Now().Before(deadline); n = openFiles(t, p) {
		time.Sleep(100 * time.Millisecond)
	}
	if n > base+8 {
		t.Fatalf("open files %d after every slow socket was closed (baseline %d)", n, base)
	}
	// No stalled acquisition holds local/slow.
	l := p.acquire(t, "token-b", "local/slow", "b-1", "op-slow", 30000)
	if l.fence == 0 {
		t.Fatal("no fence")
	}
	if r := p.do(t, "GET", "/healthz", "", nil, ""); r.status != 200 {
		t.Fatalf("healthz: %d", r.status)
	}
}

// TestOversizedHeadersAndIdleConnectionsAreCut: a header block over
// maxHeaderBytes is answered 431 and the connection closed, and a keep-alive
// connection left idle past idleTimeout is closed by the gateway; neither
// stored anything.
func TestOversizedHeadersAndIdleConnectionsAreCut(t *testing.T) {
	p := slowGateway(t, "  maxHeaderBytes: 32768\n  idleTimeout: 1s\n")
	addr := strings.TrimPrefix(p.base, "http://")
	big := slowSocket(t, addr, "PUT /v1/objects/local/big/1 HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer token-a\r\n"+
		"X-Pad: "+strings.Repeat("a", 64<<10)+"\r\nContent-Length: 1\r\n\r\nx")
	if status, err := readToClose(big, time.Minute); err != nil || status != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized headers: status %d, %v", status, err)
	}
	idle := slowSocket(t, addr, "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
	br := bufio.NewReader(idle)
	_ = idle.SetReadDeadline(time.Now().Add(time.Minute))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); err != io.EOF { // the gateway closes the idle connection
		t.Fatalf("idle keep-alive connection not closed: %v", err)
	}
	wantCode(t, p.do(t, "GET", "/v1/resources/local/big/1", "token-a", nil, ""), http.StatusNotFound, "NOT_FOUND")
}

// TestClientsThatNeverReadTheirAnswersAreCutOff: with maxConns 2, two
// sockets each send 200 pipelined requests for the OpenAPI document (166
// KB each) and never read a byte. Without a bound on writes they would
// hold both connection slots for good and nobody else would be served.
// With writeTimeout 1s the gateway cuts them off once their buffers are
// full and it cannot send, and serves others again.
func TestClientsThatNeverReadTheirAnswersAreCutOff(t *testing.T) {
	p := slowGateway(t, "  maxConns: 2\n  writeTimeout: 1s\n")
	addr := strings.TrimPrefix(p.base, "http://")
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		go func() {
			for range 200 {
				if _, err := io.WriteString(c, "GET /openapi.yaml HTTP/1.1\r\nHost: gw\r\n\r\n"); err != nil {
					return
				}
			}
		}()
	}
	// Another client is served once the gateway has cut the two off; each
	// try waits at most 5 s for its turn (a bounded wait, not a measure).
	var last error
	for range 12 {
		hc := &http.Client{Timeout: 5 * time.Second}
		resp, err := hc.Get(p.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("healthz answered %d", resp.StatusCode)
		}
		last = err
	}
	t.Fatalf("no other client served while two never read their answers: %v", last)
}
