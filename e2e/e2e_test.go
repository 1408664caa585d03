// Package e2e runs the README's flows against the built gateway binary.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// binary builds cmd/gateway once per test run (testenv.GatewayBinary).
func binary(t *testing.T) string {
	t.Helper()
	return testenv.GatewayBinary(t)
}

// freePort is a free loopback address (testenv.FreeAddr).
func freePort(t *testing.T) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

// gatewayProc is a running `gateway` process.
type gatewayProc struct {
	cmd  *exec.Cmd
	base string
	logs *bytes.Buffer
}

// startGateway runs the binary with args plus --addr and waits for /healthz.
func startGateway(t *testing.T, args ...string) *gatewayProc {
	t.Helper()
	return startGatewayEnv(t, nil, args...)
}

// startGatewayEnv is startGateway with extra environment variables (KEY=VALUE)
// added to the test's own environment.
func startGatewayEnv(t *testing.T, env []string, args ...string) *gatewayProc {
	t.Helper()
	return startBinary(t, binary(t), env, args...)
}

// startBinary is startGatewayEnv running the gateway binary bin.
func startBinary(t *testing.T, bin string, env []string, args ...string) *gatewayProc {
	t.Helper()
	addr := freePort(t)
	logs := &bytes.Buffer{}
	cmd := exec.Command(bin, append(args, "--addr", addr)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &gatewayProc{cmd: cmd, base: "http://" + addr, logs: logs}
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("gateway output:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(p.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return p
			}
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("gateway did not become healthy:\n%s", logs.String())
	return nil
}

// waitExit waits up to timeout for the process to exit on its own and returns
// its exit code; stop does nothing afterwards.
func (p *gatewayProc) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-done
		t.Fatalf("gateway did not exit within %s:\n%s", timeout, p.logs.String())
		return -1
	}
}

// stop sends SIGTERM and waits for a graceful exit.
func (p *gatewayProc) stop(t *testing.T) {
	if p.cmd.Process == nil || p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("gateway exited uncleanly after SIGINT: %v", err)
		}
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("gateway did not stop within 20s of SIGINT")
	}
}

// answer is a decoded HTTP answer.
type answer struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

func (a answer) str(k string) string { s, _ := a.json[k].(string); return s }
func (a answer) num(k string) uint64 { f, _ := a.json[k].(float64); return uint64(f) }

// do sends a request with a bearer token and optional headers and body.
func (p *gatewayProc) do(t *testing.T, method, path, token string, hdr map[string]string, body string) answer {
	t.Helper()
	return p.send(t, 20*time.Second, method, path, token, hdr, strings.NewReader(body))
}

// send is do with a streamed body and a deadline of its own.
func (p *gatewayProc) send(t *testing.T, timeout time.Duration, method, path, token string, hdr map[string]string, body io.Reader) answer {
	t.Helper()
	a, err := p.exchange(timeout, method, path, token, hdr, body)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// tryDo is do that returns transport errors (the gateway may be gone).
func (p *gatewayProc) tryDo(method, path, token string, hdr map[string]string, body string) (answer, error) {
	return p.exchange(30*time.Second, method, path, token, hdr, strings.NewReader(body))
}

// exchange sends one request and decodes the answer.
func (p *gatewayProc) exchange(timeout time.Duration, method, path, token string, hdr map[string]string, body io.Reader) (answer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, body)
	if err != nil {
		return answer{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, body: b}
	_ = json.Unmarshal(b, &a.json)
	return a, err
}

// lease is what a worker keeps from an acquisition.
type lease struct {
	id, grant, status string
	fence             uint64
}

func (p *gatewayProc) acquire(t *testing.T, token, resource, requestID, opID string, ttlMs int) lease {
	t.Helper()
	body := fmt.Sprintf(`{"resource":%q,"requestId":%q,"ttlMs":%d,"operationId":%q}`, resource, requestID, ttlMs, opID)
	a := p.do(t, "POST", "/v1/leases", token, map[string]string{"Content-Type": "application/json"}, body)
	if a.status != http.StatusCreated {
		t.Fatalf("acquire %s: %d %s", resource, a.status, a.body)
	}
	return lease{id: a.str("lease"), grant: a.str("grant"), status: a.str("statusProof"), fence: a.num("fenceToken")}
}

// freshStatus is l with a status proof fetched now from GET /v1/leases/{id},
// as the Go client refreshes its proof before a write: tests whose status
// proofs live 1 s use it so that a slow machine does not expire them.
func (p *gatewayProc) freshStatus(t *testing.T, token string, l lease) lease {
	t.Helper()
	st := p.do(t, "GET", "/v1/leases/"+l.id, token, nil, "")
	if st.status != http.StatusOK || st.str("statusProof") == "" {
		t.Fatalf("lease %s status: %d %s", l.id, st.status, st.body)
	}
	l.status = st.str("statusProof")
	return l
}

// fenceHeaders are the headers of a fenced write of segment seg under l.
func fenceHeaders(l lease, seg int) map[string]string {
	return map[string]string{"Fence-Grant": l.grant, "Fence-Status": l.status, "Fence-Segment": fmt.Sprint(seg)}
}

func (p *gatewayProc) put(t *testing.T, token string, l lease, key string, seg int, body string) answer {
	t.Helper()
	return p.do(t, "PUT", "/v1/objects/"+key, token, fenceHeaders(l, seg), body)
}

func wantCode(t *testing.T, a answer, status int, code string) {
	t.Helper()
	if a.status != status || a.str("code") != code {
		t.Fatalf("want %d %s, got %d %s", status, code, a.status, a.body)
	}
	if ct := a.header.Get("Content-Type"); code != "" && !strings.HasPrefix(ct, "application/problem+json") {
		t.Fatalf("problem answered as %q", ct)
	}
}

// TestMain removes the binary built for the run.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}
