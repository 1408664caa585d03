package kit

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
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
	// What the gateway writes must be a state directory of the dynamic
	// user (the only writable paths under ProtectSystem=strict): its data
	// directory and the directory of the trust bundle of the config the
	// unit installs. And that config must be readable by the dynamic user:
	// systemd does not hand ConfigurationDirectory= to it.
	var states []string
	for _, line := range strings.Split(src, "\n") {
		if v, ok := strings.CutPrefix(line, "StateDirectory="); ok {
			for _, d := range strings.Fields(v) {
				states = append(states, "/var/lib/"+d)
			}
		}
	}
	var cfg struct {
		TrustBundle string `json:"trustBundle"`
	}
	if err := yaml.Unmarshal(readFile(t, filepath.Join(deploy, "compose", "gateway.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"/var/lib/fencegate", filepath.Dir(cfg.TrustBundle)} {
		if !slices.Contains(states, dir) || !strings.Contains(src, "--data-dir /var/lib/fencegate") {
			t.Errorf("the gateway writes %s, which is not a StateDirectory= of the unit (%v)", dir, states)
		}
	}
	if !strings.Contains(src, "install -m 0644 deploy/compose/gateway.yaml") {
		t.Error("the unit does not install the config readable by its dynamic user")
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
