package client_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// workerModules is the whole module graph (`go list -m all`) of a worker
// whose only requirement is this client: the client, the shared domain
// types, golang.org/x/text (the domain's Unicode normalisation of resource
// names) and the three modules x/text's own go.mod names (listed in the
// graph, never built). README "The client as a module" prints the same list.
var workerModules = []string{
	"github.com/fencegate/fencegate/client",
	"github.com/fencegate/fencegate/domain",
	"golang.org/x/mod",
	"golang.org/x/sync",
	"golang.org/x/text",
	"golang.org/x/tools",
}

// workerPackages is every non-standard package compiled into that worker.
var workerPackages = []string{
	"github.com/fencegate/fencegate/client",
	"github.com/fencegate/fencegate/domain",
	"golang.org/x/text/transform",
	"golang.org/x/text/unicode/norm",
}

// TestAWorkerImportingTheClientPullsOnlyTheStatedModules builds a throwaway
// worker module that imports the client (from this checkout, by replace)
// and fails when its module graph or its compiled packages grow beyond the
// stated sets: the client must not drag the gateway's drivers and SDKs
// into a worker's build again.
func TestAWorkerImportingTheClientPullsOnlyTheStatedModules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the go command")
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := "module example.com/worker\n\ngo 1.26.8\n\n" +
		"require github.com/fencegate/fencegate/client v0.0.0\n\n" +
		"replace github.com/fencegate/fencegate/client => " + here + "\n\n" +
		"replace github.com/fencegate/fencegate/domain => " + filepath.Join(filepath.Dir(here), "domain") + "\n"
	main := "package main\n\nimport \"github.com/fencegate/fencegate/client\"\n\n" +
		"func main() { _ = client.New(\"http://127.0.0.1:8080\", \"token\") }\n"
	write(t, filepath.Join(dir, "go.mod"), gomod)
	write(t, filepath.Join(dir, "main.go"), main)
	goCmd(t, dir, "mod", "tidy")
	var mods []string
	for _, l := range strings.Split(goCmd(t, dir, "list", "-m", "-f", "{{.Path}}", "all"), "\n") {
		if l != "" && l != "example.com/worker" {
			mods = append(mods, l)
		}
	}
	slices.Sort(mods)
	t.Logf("go list -m all of a worker importing the client (%d modules besides the worker):\n%s", len(mods), strings.Join(mods, "\n"))
	if !slices.Equal(mods, workerModules) {
		t.Errorf("worker module graph = %v, want exactly %v", mods, workerModules)
	}
	var pkgs []string
	for _, l := range strings.Split(goCmd(t, dir, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "."), "\n") {
		if l != "" && l != "example.com/worker" {
			pkgs = append(pkgs, l)
		}
	}
	slices.Sort(pkgs)
	if !slices.Equal(pkgs, workerPackages) {
		t.Errorf("worker's compiled non-standard packages = %v, want exactly %v", pkgs, workerPackages)
	}
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return string(out)
}
