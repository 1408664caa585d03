package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Rule: registry.leaseRetention (how long every coordination backend keeps
// a lease record no longer held, and its request ID) defaults to 7 days, is
// read from the file, and is refused up front, with the other problems,
// below registry.MinLeaseRetention or not above registry.maxTTL.
func TestLeaseRetentionDefaultsToSevenDaysAndIsValidatedWithTheRest(t *testing.T) {
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	if got := c.Registry.Retention(); got != 7*24*time.Hour {
		t.Fatalf("default lease retention %s, want 7 days", got)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		retention, maxTTL time.Duration
		want              string
	}{
		{-time.Hour, 0, "registry.leaseRetention must be at least 1h"},
		{time.Minute, 0, "registry.leaseRetention must be at least 1h"},
		{time.Hour, 0, "must exceed registry.maxTTL (1h0m0s)"},
		{2 * time.Hour, 3 * time.Hour, "must exceed registry.maxTTL (3h0m0s)"},
	} {
		c.Registry.LeaseRetention, c.Registry.MaxTTL = bad.retention, bad.maxTTL
		c.Identities = []Identity{{Name: "w", Token: "t"}, {Token: "t2"}} // another problem, reported too
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), "identities[1] needs a name") {
			t.Errorf("leaseRetention %s maxTTL %s: got %v, want %q and the other problem", bad.retention, bad.maxTTL, err, bad.want)
		}
	}

	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("registry:\n  issuerEpoch: 1\n  leaseRetention: 48h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := Default()
	if err := Load(p, &f); err != nil {
		t.Fatal(err)
	}
	if f.Registry == nil || f.Registry.Retention() != 48*time.Hour {
		t.Fatalf("leaseRetention from the file: %+v", f.Registry)
	}
}
