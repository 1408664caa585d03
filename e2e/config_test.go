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

// TestHelpOfEverySubcommandExitsZero: `gateway dev|serve|registry --help`
// prints the subcommand's flags and exits 0 (help was asked for, not a
// usage mistake); an unknown flag still exits 2.
func TestHelpOfEverySubcommandExitsZero(t *testing.T) {
	for _, sub := range []string{"dev", "serve", "registry"} {
		out, err := exec.Command(binary(t), sub, "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "-registry-backend") {
			t.Fatalf("gateway %s --help: %v\n%s", sub, err, out)
		}
		if strings.Contains(string(out), "help requested") {
			t.Fatalf("gateway %s --help reports an error:\n%s", sub, out)
		}
	}
	err := exec.Command(binary(t), "serve", "--no-such-flag").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
		t.Fatalf("gateway serve --no-such-flag: %v, want exit 2", err)
	}
}
