package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestFencectlAsANewcomerUsesIt: the built CLI against the built gateway,
// as a newcomer would: version names the module and Go; the bash
// completion script parses; a write before acquiring exits 4 (local); a
// skipped segment is refused by the gateway with exit 1 and, with --json,
// one problem-shaped object on stderr; a gateway that does not answer is
// exit 3.
func TestFencectlAsANewcomerUsesIt(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a")
	bin := testenv.FencectlBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "part"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl := func(gateway string, args ...string) (stdout, stderr string, code int) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "FENCEGATE_URL="+gateway, "FENCEGATE_TOKEN=token-a")
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return o.String(), e.String(), code
	}
	out, _, code := ctl(p.base, "--json", "version")
	var v struct{ Module, Version, GoVersion string }
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Module != "github.com/fencegate/fencegate" || v.GoVersion != runtime.Version() || v.Version == "" {
		t.Fatalf("version: %d %s", code, out)
	}
	out, _, code = ctl(p.base, "completion", "bash")
	if code != 0 || !strings.Contains(out, "complete -o default -F _fencectl fencectl") {
		t.Fatalf("completion bash: %d %.200s", code, out)
	}
	if b, err := exec.Command("bash", "-n", "-c", out).CombinedOutput(); err != nil {
		t.Fatalf("the bash script does not parse: %v %s", err, b)
	}
	if _, errOut, code := ctl(p.base, "put", "local/cli/1", "part"); code != 4 || !strings.Contains(errOut, "error: LOCAL: no lease file") {
		t.Fatalf("put before acquire: exit %d %q", code, errOut)
	}
	if _, errOut, code := ctl(p.base, "acquire", "local/cli/1", "--ttl", "30s", "--operation", "cli-new"); code != 0 {
		t.Fatalf("acquire: %d %s", code, errOut)
	}
	out, errOut, code := ctl(p.base, "--json", "put", "local/cli/1/part", "part", "--segment", "9")
	var d map[string]any
	if code != 1 || out != "" || json.Unmarshal([]byte(errOut), &d) != nil || d["code"] != "SEGMENT_OUT_OF_ORDER" ||
		d["type"] != "urn:fencegate:problem:segment_out_of_order" || d["exitCode"] != float64(1) || d["hint"] == "" {
		t.Fatalf("skipped segment: exit %d stdout %q stderr %q", code, out, errOut)
	}
	if _, errOut, code := ctl(p.base, "put", "local/cli/1/part", "part"); code != 0 {
		t.Fatalf("put: %d %s", code, errOut)
	}
	if _, errOut, code := ctl("http://"+freePort(t), "receipts", "--operation", "cli-new"); code != 3 || !strings.Contains(errOut, "error: UNCERTAIN") {
		t.Fatalf("no gateway: exit %d %q", code, errOut)
	}
}
