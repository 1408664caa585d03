package config

import (
	"strings"
	"testing"
)

// Rule: registryBundleUnsigned is refuse (also unset) or accept, and accept
// needs a registryURL whose bundles it is about; every problem is reported
// with the others.
func TestRegistryBundleUnsignedIsRefuseOrAcceptWithARegistryURL(t *testing.T) {
	for _, tc := range []struct {
		value    string
		registry bool
		problem  string
	}{
		{"", true, ""},
		{"refuse", true, ""},
		{"accept", true, ""},
		{"refuse", false, ""},
		{"accept", false, "registryBundleUnsigned: accept is for bundles fetched from registryURL"},
		{"yes", true, `registryBundleUnsigned must be refuse or accept, not "yes"`},
	} {
		c := replicaConfig()
		c.RegistryBundleUnsigned = tc.value
		if !tc.registry {
			c.RegistryURL, c.RegistryCredential = "", Identity{}
		}
		c.KeyOverlap = 0 // another problem, reported beside it
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "keyOverlap") {
			t.Fatalf("%q: the other problem is not reported: %v", tc.value, err)
		}
		if got := strings.Contains(err.Error(), "registryBundleUnsigned"); got != (tc.problem != "") || !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("%q (registryURL %v): %v, want %q", tc.value, tc.registry, err, tc.problem)
		}
		if want := tc.value == "accept" && tc.registry; c.AcceptsUnsignedBundles() != want {
			t.Errorf("%q (registryURL %v): AcceptsUnsignedBundles %v", tc.value, tc.registry, !want)
		}
	}
}
