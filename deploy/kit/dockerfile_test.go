package kit

import (
	"bytes"
	"debug/elf"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// instr is one Dockerfile instruction: its keyword (lower case), its
// arguments as the parser split them, and whether it used the JSON form.
type instr struct {
	cmd   string
	args  []string
	flags []string
	json  bool
	line  int
}

// parseDockerfile parses deploy/Dockerfile with BuildKit's own parser.
func parseDockerfile(t *testing.T) []instr {
	t.Helper()
	res, err := parser.Parse(bytes.NewReader(readFile(t, filepath.Join(deploy, "Dockerfile"))))
	if err != nil {
		t.Fatalf("parse deploy/Dockerfile: %v", err)
	}
	if len(res.Warnings) > 0 {
		t.Fatalf("deploy/Dockerfile warnings: %+v", res.Warnings)
	}
	var out []instr
	for _, n := range res.AST.Children {
		in := instr{cmd: strings.ToLower(n.Value), flags: n.Flags, json: n.Attributes["json"], line: n.StartLine}
		for a := n.Next; a != nil; a = a.Next {
			in.args = append(in.args, a.Value)
		}
		out = append(out, in)
	}
	return out
}

// finalStage is the instructions after the last FROM, and that FROM.
func finalStage(ins []instr) (instr, []instr) {
	last := 0
	for i, in := range ins {
		if in.cmd == "from" {
			last = i
		}
	}
	return ins[last], ins[last+1:]
}

// goBuild is one `go build` RUN line of the Dockerfile, expanded with the
// build args: its environment assignments and the go command's arguments.
type goBuild struct {
	env  []string
	args []string // after "go"
	out  string   // the -o value
}

// goBuilds expands every RUN line that runs `go build`, with args as the
// --build-arg values (the ARG defaults otherwise), by BuildKit's shell lexer.
func goBuilds(t *testing.T, ins []instr, args map[string]string) []goBuild {
	t.Helper()
	vars := map[string]string{}
	var out []goBuild
	lex := shell.NewLex('\\')
	for _, in := range ins {
		switch in.cmd {
		case "arg":
			name, def, _ := strings.Cut(in.args[0], "=")
			vars[name] = def
			if v, ok := args[name]; ok {
				vars[name] = v
			}
		case "run":
			if in.json || !strings.Contains(in.args[0], "go build") {
				continue
			}
			if strings.ContainsAny(in.args[0], ";&|`$(") && !strings.Contains(in.args[0], "${") {
				t.Fatalf("line %d: a go build RUN line is one simple command, got %q", in.line, in.args[0])
			}
			var kv []string
			for k, v := range vars {
				kv = append(kv, k+"="+v)
			}
			words, err := lex.ProcessWords(in.args[0], shell.EnvsFromSlice(kv))
			if err != nil {
				t.Fatalf("line %d: %v", in.line, err)
			}
			var b goBuild
			i := 0
			for ; i < len(words) && strings.Contains(words[i], "=") && !strings.HasPrefix(words[i], "-"); i++ {
				b.env = append(b.env, words[i])
			}
			if i+1 >= len(words) || words[i] != "go" || words[i+1] != "build" {
				t.Fatalf("line %d: want [ENV=V...] go build ..., got %q", in.line, words)
			}
			b.args = words[i+1:]
			for j, w := range b.args {
				if w == "-o" && j+1 < len(b.args) {
					b.out = b.args[j+1]
				}
			}
			out = append(out, b)
		}
	}
	return out
}

// TestDockerfileFinalStageIsDistrolessNonRootWithABinaryHealthcheck: the image
// runs from distroless/static (or scratch) as a non-root user, and its
// HEALTHCHECK runs the gateway binary itself (no shell there).
func TestDockerfileFinalStageIsDistrolessNonRootWithABinaryHealthcheck(t *testing.T) {
	ins := parseDockerfile(t)
	from, stage := finalStage(ins)
	if img := from.args[0]; !strings.HasPrefix(img, "gcr.io/distroless/static") && img != "scratch" {
		t.Fatalf("final stage FROM %s: want distroless/static or scratch", img)
	}
	if n := slices.IndexFunc(ins, func(in instr) bool { return in.cmd == "from" }); ins[n].line == from.line {
		t.Fatal("the Dockerfile has one stage: the build needs its own")
	}
	var user, hc, entry []string
	for _, in := range stage {
		switch in.cmd {
		case "user":
			user = in.args
		case "healthcheck":
			hc = in.args
			if !in.json {
				t.Fatalf("HEALTHCHECK in shell form needs a shell: %v", in.args)
			}
		case "entrypoint":
			entry = in.args
		}
	}
	if len(user) == 0 {
		t.Fatal("final stage has no USER")
	}
	if u, _, _ := strings.Cut(user[0], ":"); u == "root" || u == "0" {
		t.Fatalf("USER %s", user[0])
	}
	if len(hc) < 3 || hc[0] != "CMD" || hc[1] != "/usr/local/bin/gateway" || hc[2] != "healthcheck" {
		t.Fatalf("HEALTHCHECK %q: want CMD /usr/local/bin/gateway healthcheck", hc)
	}
	if len(entry) == 0 || entry[0] != "/usr/local/bin/gateway" {
		t.Fatalf("ENTRYPOINT %q", entry)
	}
}

var (
	builtOnce sync.Once
	built     map[string]string // -o path in the Dockerfile -> built file
	builtErr  error
)

const testVersion = "v0.0.0-kit-test"

// buildAsDockerfile runs the Dockerfile's go build lines, with exactly their
// flags and environment, in the repository root (VERSION=testVersion);
// each -o is redirected into a temporary directory.
func buildAsDockerfile(t *testing.T) map[string]string {
	t.Helper()
	builds := goBuilds(t, parseDockerfile(t), map[string]string{"VERSION": testVersion})
	builtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fencegate-kit-")
		if err != nil {
			builtErr = err
			return
		}
		built = map[string]string{}
		for _, b := range builds {
			dst := filepath.Join(dir, filepath.Base(b.out))
			args := slices.Clone(b.args)
			args[slices.Index(args, "-o")+1] = dst
			cmd := exec.Command("go", args...)
			cmd.Dir = repo
			cmd.Env = append(os.Environ(), b.env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				builtErr = fmt.Errorf("go %v: %v\n%s", args, err, out)
				return
			}
			built[b.out] = dst
		}
	})
	if builtErr != nil {
		t.Fatal(builtErr)
	}
	return built
}

// TestDockerfileGoBuildIsStaticTrimmedAndStampsTheVersion: every go build line
// of the Dockerfile sets CGO_ENABLED=0 and -trimpath; the gateway's stamps
// VERSION through -ldflags; the image copies every binary they build.
func TestDockerfileGoBuildIsStaticTrimmedAndStampsTheVersion(t *testing.T) {
	ins := parseDockerfile(t)
	builds := goBuilds(t, ins, map[string]string{"VERSION": testVersion})
	if len(builds) == 0 {
		t.Fatal("no go build line")
	}
	var outs []string
	for _, b := range builds {
		if !slices.Contains(b.env, "CGO_ENABLED=0") || !slices.Contains(b.args, "-trimpath") || b.out == "" {
			t.Errorf("go build %q env %q: want CGO_ENABLED=0, -trimpath and -o", b.args, b.env)
		}
		outs = append(outs, b.out)
	}
	if !slices.ContainsFunc(builds, func(b goBuild) bool {
		return b.out == "/out/gateway" && slices.ContainsFunc(b.args, func(a string) bool {
			return strings.Contains(a, "internal/metrics.Version="+testVersion)
		})
	}) {
		t.Errorf("no go build of /out/gateway stamping internal/metrics.Version=${VERSION}: %+v", builds)
	}
	_, stage := finalStage(ins)
	var copied []string
	for _, in := range stage {
		if in.cmd == "copy" && slices.Contains(in.flags, "--from=build") {
			copied = append(copied, in.args[:len(in.args)-1]...)
		}
	}
	for _, o := range outs {
		if !slices.Contains(copied, o) {
			t.Errorf("%s is built but not copied into the image (COPY --from=build %v)", o, copied)
		}
	}
}

// TestDockerfileBinaryIsStaticPrintsItsVersionAndHealthchecks builds the
// binaries as the Dockerfile does and checks the gateway: an ELF with no
// interpreter and no shared libraries (runs on distroless/static), `gateway
// version` names the stamped version, and `gateway healthcheck URL` exits 0
// against a running `gateway dev` and 1 against a closed port.
func TestDockerfileBinaryIsStaticPrintsItsVersionAndHealthchecks(t *testing.T) {
	bins := buildAsDockerfile(t)
	for out, bin := range bins {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("%s is dynamically linked (program header %v)", out, p.Type)
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("%s needs %v", out, libs)
		}
		f.Close()
	}
	gw := bins["/out/gateway"]
	v, err := exec.Command(gw, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), testVersion) {
		t.Fatalf("gateway version: %v %s", err, v)
	}

	addr := freeAddr(t)
	srv := exec.Command(gw, "dev", "--addr", addr, "--data-dir", t.TempDir())
	var logs bytes.Buffer
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	url := "http://" + addr + "/healthz"
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway dev never healthy:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out, err := exec.Command(gw, "healthcheck", url).CombinedOutput(); err != nil {
		t.Fatalf("healthcheck of a healthy gateway: %v %s", err, out)
	}
	err = exec.Command(gw, "healthcheck", "http://"+freeAddr(t)+"/healthz").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("healthcheck of a closed port: %v, want exit status 1", err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
