package fencegate_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestRootReExportsEveryDomainName regenerates the root package's aliases
// from domain/ and fails when domain_aliases.go differs: a name added to the
// domain is reachable under the gateway's import path too.
func TestRootReExportsEveryDomainName(t *testing.T) {
	want, err := exec.Command("go", "run", "./scripts/gen-domain-aliases", "domain").Output()
	if err != nil {
		t.Fatalf("generator: %v", err)
	}
	got, err := os.ReadFile("domain_aliases.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("domain_aliases.go is stale: run go run ./scripts/gen-domain-aliases domain > domain_aliases.go")
	}
}
