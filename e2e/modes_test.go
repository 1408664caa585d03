package e2e

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runToExit runs the binary with args and returns its exit code and output;
// it fails the test if the process is still running after a minute.
func runToExit(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, binary(t), append(args, "--addr", freePort(t))...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v still running after a minute:\n%s", args, out.String())
	}
	if err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), out.String()
}

// TestRestartWithAConfigThatSwitchesValidationOffIsRefusedUnlessBreakGlass:
// the enforcement modes in force are stored; a restart of the binary with an
// edited config that moves a pattern from enforce to shadow, or removes its
// enforce rule, exits without serving and changes nothing, unless started
// with --break-glass, which is logged and counted.
func TestRestartWithAConfigThatSwitchesValidationOffIsRefusedUnlessBreakGlass(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	data := filepath.Join(dir, "data")
	writeCfg := func(yml string) {
		if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	enforced := "modes:\n  - {pattern: \"local/roll/*\", mode: enforce}\n"
	shadowed := "modes:\n  - {pattern: \"local/roll/*\", mode: shadow}\n"
	args := []string{"dev", "--config", cfg, "--data-dir", data, "--identity", "worker-a=token-a", "--admin-token", "ops-token"}

	writeCfg(enforced)
	p := startGateway(t, args...)
	a := p.acquire(t, "token-a", "local/roll/x", "a-1", "roll", 120000)
	if r := p.put(t, "token-a", a, "local/roll/x", 1, "one"); r.status != http.StatusOK {
		t.Fatalf("segment 1: %d %s", r.status, r.body)
	}
	wantCode(t, p.put(t, "token-a", a, "local/roll/x", 3, "skipped"), http.StatusConflict, "SEGMENT_OUT_OF_ORDER")
	p.stop(t)
	stored, err := os.ReadFile(filepath.Join(data, "authority.json"))
	if err != nil || !strings.Contains(string(stored), `"modesInForce"`) {
		t.Fatalf("modes in force not stored: %s %v", stored, err)
	}

	for name, yml := range map[string]string{"enforce to shadow": shadowed, "enforce rule removed": "modes: []\n"} {
		writeCfg(yml)
		code, out := runToExit(t, args...)
		if code != 1 || !strings.Contains(out, "--break-glass") || !strings.Contains(out, `"local/roll/*"`) {
			t.Fatalf("%s: start not refused (exit %d):\n%s", name, code, out)
		}
		if now, _ := os.ReadFile(filepath.Join(data, "authority.json")); !bytes.Equal(now, stored) {
			t.Fatalf("%s: a refused start changed the stored state:\n%s\n->\n%s", name, stored, now)
		}
	}

	// The unedited config starts, still enforcing, nothing moved.
	writeCfg(enforced)
	p = startGateway(t, args...)
	wantCode(t, p.put(t, "token-a", a, "local/roll/x", 3, "skipped"), http.StatusConflict, "SEGMENT_OUT_OF_ORDER")
	if st := p.do(t, "GET", "/v1/resources/local/roll/x", "token-a", nil, ""); st.num("lastSegmentSeq") != 1 {
		t.Fatalf("resource after the refused starts: %s", st.body)
	}
	p.stop(t)

	// Break-glass: the start is allowed, logged and counted; shadow is in force.
	writeCfg(shadowed)
	maddr := freePort(t)
	p = startGateway(t, append(args, "--break-glass", "--metrics-addr", maddr)...)
	if !strings.Contains(p.logs.String(), "BREAK-GLASS") || !strings.Contains(p.logs.String(), "pattern=local/roll/*") {
		t.Fatalf("break-glass start not logged:\n%s", p.logs.String())
	}
	m := (&gatewayProc{base: "http://" + maddr}).do(t, "GET", "/metrics", "", nil, "")
	if !strings.Contains(string(m.body), `fencegate_break_glass_total{source="start"} 1`) {
		t.Fatalf("break-glass start not counted:\n%.2000s", m.body)
	}
	if r := p.put(t, "token-a", a, "local/roll/x", 3, "shadowed"); r.status != http.StatusOK || r.header.Get("Fence-Verdict") != "SEGMENT_OUT_OF_ORDER" {
		t.Fatalf("shadow after break-glass: %d %v %s", r.status, r.header, r.body)
	}
	p.stop(t)

	// Shadow is now what is in force: the same config starts without break-glass.
	p = startGateway(t, args...)
	if st := p.do(t, "GET", "/v1/admin/state", "ops-token", nil, ""); !strings.Contains(string(st.body), `"mode":"shadow"`) {
		t.Fatalf("modes after the break-glass start: %s", st.body)
	}
}
