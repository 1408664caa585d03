package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadAPIsSectionStopsTheBinaryWithEveryProblemAndItsLine: the gateway
// refuses to start on an invalid `apis:` section, naming each problem with
// FILE:LINE, all in one run, before it listens.
func TestBadAPIsSectionStopsTheBinaryWithEveryProblemAndItsLine(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(cfg, []byte(`apis:
  - name: payouts
    baseURL: payments.example.com
    key: {maxLength: 20}
    contract:
      idempotency: {keyRetention: 24h}
    routes:
      - {method: TRACE, path: "/v1/pay/{id}", resource: "pay/{id}"}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), "dev", "--config", cfg, "--data-dir", filepath.Join(dir, "data"), "--addr", freePort(t), "--identity", "w=t")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
		t.Fatalf("gateway started on an invalid config (err %v):\n%s", err, out)
	}
	for _, want := range []string{"gateway.yaml:3: INVALID_REQUEST: api \"payouts\": baseURL", "gateway.yaml:4: INVALID_REQUEST: api \"payouts\": key.maxLength 20", "gateway.yaml:8: INVALID_REQUEST: api \"payouts\": routes[0]"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
