package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// needShell finds a shell, which scripts/test.sh installs (ensure_shells):
// missing under CI=true fails the test, elsewhere skips it.
func needShell(t *testing.T, name string) string {
	t.Helper()
	return testenv.Tool(t, name, "apt-get install "+name+", or scripts/services.sh ensure_shells")
}

// script writes `fencectl completion SHELL` to a file and returns its path.
func script(t *testing.T, shell string) string {
	t.Helper()
	var o, e bytes.Buffer
	if code := run([]string{"completion", shell}, &o, &e); code != 0 {
		t.Fatalf("completion %s: exit %d %s", shell, code, e.String())
	}
	p := filepath.Join(t.TempDir(), "fencectl."+shell)
	if err := os.WriteFile(p, o.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func shellOut(t *testing.T, sh string, args ...string) string {
	t.Helper()
	out, err := exec.Command(sh, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", sh, args, err, out)
	}
	return string(out)
}

// TestBashCompletesVerbsFlagsAndValues: the bash script completes verbs,
// the verb's own and the global flags, skips a flag's value when finding
// the verb, offers nothing (so bash's default, files) for a flag's value or
// an argument, and the completion verb's shells.
func TestBashCompletesVerbsFlagsAndValues(t *testing.T) {
	sh := needShell(t, "bash")
	s := script(t, "bash")
	cases := map[string]string{
		`fencectl ac`:                    "acquire",
		`fencectl --gateway http://x pu`: "put",
		`fencectl put --se`:              "--segment",
		`fencectl acquire --o`:           "--operation",
		`fencectl --j`:                   "--json",
		`fencectl acquire --ttl `:        "",
		`fencectl get -o out `:           "",
		`fencectl completion `:           "bash zsh fish",
		`fencectl v`:                     "version",
	}
	for line, want := range cases {
		words := strings.Split(line, " ")
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		prog := "source " + s + "; COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" +
			strconv.Itoa(len(words)-1) + `; _fencectl; echo "${COMPREPLY[*]}"`
		if got := strings.TrimSpace(shellOut(t, sh, "-c", prog)); got != want {
			t.Errorf("%q completes to %q, want %q", line, got, want)
		}
	}
}

// TestZshCompletesVerbsAndFlags: the zsh script, with zsh's completion
// builtins replaced by ones that print what they were given, describes the
// verbs, adds the verb's flags, and leaves arguments to _files.
func TestZshCompletesVerbsAndFlags(t *testing.T) {
	sh := needShell(t, "zsh")
	s := script(t, "zsh")
	stubs := `compadd() { print -r -- "compadd $*" }; _describe() { print -r -- "describe ${(P)2}" }; _files() { print files }; source ` + s + "; "
	out := shellOut(t, sh, "-c", stubs+`words=(fencectl ac); CURRENT=2; _fencectl`)
	if !strings.HasPrefix(out, "describe ") || !strings.Contains(out, "acquire:take a lease") || !strings.Contains(out, "version:") {
		t.Errorf("verbs: %s", out)
	}
	out = shellOut(t, sh, "-c", stubs+`words=(fencectl --token t put --se); CURRENT=5; _fencectl`)
	if !strings.HasPrefix(out, "compadd -- ") || !strings.Contains(out, " --segment ") || !strings.Contains(out, " --content-type ") || strings.Contains(out, "--ttl") {
		t.Errorf("put's flags: %s", out)
	}
	if out = shellOut(t, sh, "-c", stubs+`words=(fencectl put a ''); CURRENT=4; _fencectl`); strings.TrimSpace(out) != "files" {
		t.Errorf("put's argument: %s", out)
	}
	if out = shellOut(t, sh, "-c", stubs+`words=(fencectl completion ''); CURRENT=3; _fencectl`); strings.TrimSpace(out) != "compadd -- bash zsh fish" {
		t.Errorf("completion's argument: %s", out)
	}
}

// TestFishCompletesVerbsAndFlags: fish's own `complete -C` over the script.
func TestFishCompletesVerbsAndFlags(t *testing.T) {
	sh := needShell(t, "fish")
	s := script(t, "fish")
	out := shellOut(t, sh, "-c", "source "+s+`; complete -C "fencectl ac"`)
	if !strings.HasPrefix(out, "acquire\ttake a lease") {
		t.Errorf("verbs: %q", out)
	}
	out = shellOut(t, sh, "-c", "source "+s+`; complete -C "fencectl put --seg"`)
	if !strings.HasPrefix(out, "--segment\t") {
		t.Errorf("put's flags: %q", out)
	}
	out = shellOut(t, sh, "-c", "source "+s+`; complete -C "fencectl completion "`)
	if strings.Fields(out)[0] != "bash" || !strings.Contains(out, "fish") {
		t.Errorf("completion's argument: %q", out)
	}
}

// TestCompletionOfAnotherShellIsUsage: an unknown shell exits 2.
func TestCompletionOfAnotherShellIsUsage(t *testing.T) {
	var o, e bytes.Buffer
	if code := run([]string{"completion", "tcsh"}, &o, &e); code != exitUsage || o.Len() != 0 {
		t.Fatalf("exit %d, stdout %q", code, o.String())
	}
}

// TestVersionPrintsTheBuildRecord: module, version, Go version and VCS
// revision come from runtime/debug's build info, in text and --json.
func TestVersionPrintsTheBuildRecord(t *testing.T) {
	readBuildInfo = func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Path: "github.com/fencegate/fencegate", Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	t.Cleanup(func() { readBuildInfo = debug.ReadBuildInfo })
	var o, e bytes.Buffer
	if code := run([]string{"version"}, &o, &e); code != 0 {
		t.Fatalf("exit %d %s", code, e.String())
	}
	for _, want := range []string{"v1.2.3", "github.com/fencegate/fencegate", "go1.99", "abc123 (modified)", "2026-12-01T10:00:00Z"} {
		if !strings.Contains(o.String(), want) {
			t.Errorf("version lacks %q:\n%s", want, o.String())
		}
	}
	o.Reset()
	if code := run([]string{"--json", "version"}, &o, &e); code != 0 ||
		!strings.Contains(o.String(), `"version": "v1.2.3"`) || !strings.Contains(o.String(), `"vcsRevision": "abc123"`) || !strings.Contains(o.String(), `"vcsModified": true`) {
		t.Fatalf("--json version: %d %s", code, o.String())
	}
	readBuildInfo = func() (*debug.BuildInfo, bool) { return &debug.BuildInfo{GoVersion: "go1.99"}, true }
	o.Reset()
	if code := run([]string{"--json", "version"}, &o, &e); code != 0 || !strings.Contains(o.String(), `"version": "(devel)"`) {
		t.Fatalf("no module version: %d %s", code, o.String())
	}
}
