package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Gateways of earlier layouts, for the upgrade and rollback tests: built
// from this repository's history unless the environment names a binary.
const (
	// layout3Commit writes layout 3 with JSON values (before the compact
	// codec and layout 4).
	layout3Commit = "02a7263707293c39b19598cd56097302a6fbe4f5"
	// layout3CodecCommit is layout 3 that reads the compact codec (the
	// last before layout 4).
	layout3CodecCommit = "8441e611ab3da69221a25f00973040a83499ecd7"
)

// olderGateway returns the binary $env names, or builds cmd/gateway as it
// was at commit (git archive of this repository, go build). Where that is
// impossible (no git history, a shallow clone) the test fails under
// CI=true and is skipped elsewhere.
func olderGateway(t *testing.T, env, commit string) string {
	t.Helper()
	if bin := os.Getenv(env); bin != "" {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatal(err)
		}
		return bin
	}
	fail := t.Skipf
	if os.Getenv("CI") != "" {
		fail = t.Fatalf
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		fail("no git history to build the gateway at %s from (or set %s): %v", commit, env, err)
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", strings.TrimSpace(string(top)), commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		fail("git archive %s (or set %s): %v\n%s", commit, env, err, out)
	}
	bin := filepath.Join(t.TempDir(), "gateway-"+commit[:7])
	// -trimpath keeps the temporary source directory out of the build, so
	// the build cache serves the next run's build of the same commit
	// (seconds) instead of compiling every package again (about 40 s each).
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/gateway")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		fail("build the gateway at %s (or set %s): %v\n%s", commit, env, err, out)
	}
	return bin
}
