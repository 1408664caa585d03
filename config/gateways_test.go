package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGatewayIdentitiesNeedARegistryAndTokensOfTheirOwn(t *testing.T) {
	c := Default()
	c.TrustBundle = "bundle.json"
	c.Identities = []Identity{{Name: "w", Token: "work"}}
	c.Admins = []Identity{{Name: "ops", Token: "admin"}}
	c.Gateways = []Identity{{Name: "g1", Token: "work"}, {Name: "g2", Token: "admin"}, {Name: "g3"}}
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid gateways accepted")
	}
	for _, want := range []string{`gateway "g1" shares its token with a workload identity`, `gateway "g2" shares its token with an admin`,
		`identity "g3": empty token`, "gateways are answered by an in-process registry"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	d := Dev()
	d.Identities = c.Identities
	d.Gateways = []Identity{{Name: "replica", Token: "gw"}}
	if err := d.Validate(); err != nil {
		t.Fatalf("a registry with a gateway identity: %v", err)
	}
}

func TestBreakGlassIsAFlagNeverAConfigField(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("breakGlass: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	if err := Load(p, &c); err == nil || c.BreakGlass {
		t.Fatalf("breakGlass taken from the file: %v %v", err, c.BreakGlass)
	}
}
