package kit

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const unit = "fencegate-gateway.service"

// TestSystemdUnitVerifiesCleanAndIsHardened runs `systemd-analyze verify` on
// deploy/systemd's unit (its ExecStart pointed at a gateway built as the
// Dockerfile builds it) and fails on any diagnostic, since unknown keys are
// only warnings there; then `systemd-analyze security --offline` must rate
// its exposure at most 2.0, and the unit must keep the hardening the README
// promises.
func TestSystemdUnitVerifiesCleanAndIsHardened(t *testing.T) {
	sa := need(t, "systemd-analyze", "apt-get install systemd")
	src := string(readFile(t, filepath.Join(deploy, "systemd", unit)))
	for _, want := range []string{"DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
		"PrivateTmp=yes", "CapabilityBoundingSet=\n", "StateDirectory=fencegate", "ExecStart=/usr/local/bin/gateway serve --config "} {
		if !strings.Contains(src, want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	gw := buildAsDockerfile(t)["/out/gateway"]
	dir := t.TempDir()
	path := filepath.Join(dir, unit)
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(src, "/usr/local/bin/gateway", gw)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(sa, "security", "--offline=yes", "--threshold=20", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security (threshold 2.0): %v\n%s", err, out)
	}
}
