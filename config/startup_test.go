package config

import (
	"strings"
	"testing"
	"time"
)

// Rule: what would only fail once the process runs is refused up front,
// with the rest: an identity, admin or gateway without a name (its token
// could never authenticate anyone), a registryURL that is not an http(s)
// URL with a host, a registry.maxTTL below the registry's minimum, and
// registry.highWater fencestore where this process's fence store is its own
// (no stores or APIs served, not a shared postgres store: no gateway writes
// it, and grants would resume above 0 after a state loss).
func TestWhatWouldFailAtStartIsRefusedUpFront(t *testing.T) {
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}, {Token: "t2"}}
	c.Admins = []Identity{{TokenEnv: "NOPE_UNSET_TOKEN_FOR_TEST", Token: "ops"}}
	c.Registry.MaxTTL = -time.Nanosecond
	err := c.Validate()
	for _, want := range []string{"identities[1] needs a name", "admins[0] needs a name", "registry.maxTTL must be at least"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}

	replica := Default()
	replica.Identities = []Identity{{Name: "w", Token: "t"}}
	replica.TrustBundle = "/b.json"
	replica.RegistryURL = "fencegate-registry:8080"
	replica.RegistryCredential = Identity{Name: "gw", Token: "g"}
	if err := replica.Validate(); err == nil || !strings.Contains(err.Error(), "registryURL must be an https:// URL with a host") {
		t.Errorf("a registryURL without a scheme: %v", err)
	}
	replica.RegistryURL = "https://registry.internal:8443"
	if err := replica.Validate(); err != nil {
		t.Errorf("a valid replica: %v", err)
	}

	reg := RegistryOnly()
	reg.Identities = []Identity{{Name: "w", Token: "t"}}
	reg.Registry.HighWater = "fencestore"
	if err := reg.Validate(); err == nil || !strings.Contains(err.Error(), "registry.highWater fencestore") {
		t.Errorf("highWater fencestore on the registry's own fence store: %v", err)
	}
	reg.FenceStore = "postgres://gw@db/fences"
	if err := reg.Validate(); err != nil && strings.Contains(err.Error(), "registry.highWater") {
		t.Errorf("highWater fencestore on the gateways' postgres store: %v", err)
	}
}
