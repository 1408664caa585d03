package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/fencegate/fencegate/config"
)

// Flags lie over the config file: --admin-token and --gateway add to the
// file's admins: and gateways:, as --identity adds to its identities. They
// were appended before the file was loaded, whose lists replaced them.
func TestTokenFlagsAddToTheConfigFilesLists(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	yaml := "admins:\n  - {name: ops, token: file-admin}\ngateways:\n  - {name: gw1, token: file-gw}\n" +
		"identities:\n  - {name: worker-a, token: file-worker}\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.RegistryOnly()
	if err := parseFlags("registry", []string{"--config", file, "--admin-token", "flag-admin", "--gateway", "gw2=flag-gw",
		"--identity", "worker-b=flag-worker"}, &cfg); err != nil {
		t.Fatal(err)
	}
	tokens := func(ids []config.Identity) []string {
		var out []string
		for _, id := range ids {
			out = append(out, id.Name+"="+id.Token)
		}
		return out
	}
	for what, c := range map[string]struct{ got, want []string }{
		"admins":     {tokens(cfg.Admins), []string{"ops=file-admin", "admin-2=flag-admin"}},
		"gateways":   {tokens(cfg.Gateways), []string{"gw1=file-gw", "gw2=flag-gw"}},
		"identities": {tokens(cfg.Identities), []string{"worker-a=file-worker", "worker-b=flag-worker"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s = %v, want %v", what, c.got, c.want)
		}
	}
}
