package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// replicaConfig is a valid replica: a trust bundle file and a registryURL.
func replicaConfig() Config {
	c := Default()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	c.TrustBundle = "/b.json"
	c.RegistryURL = "https://registry.internal:8443"
	c.RegistryCredential = Identity{Name: "gw", Token: "g"}
	return c
}

// Rule: a replica installs the trust bundle registryURL answers (the keys
// it trusts, for good) and sends the gateway credential there, so
// registryURL must be https://, unless its host is loopback or
// registryInsecureHTTP opts in for a private network.
func TestPlainHTTPRegistryURLIsRefusedUnlessLoopbackOrOptedIn(t *testing.T) {
	for _, tc := range []struct {
		url    string
		optIn  bool
		refuse bool
	}{
		{"https://registry.internal:8443", false, false},
		{"http://registry:8080", false, true},
		{"http://10.0.0.7:8080", false, true},
		{"http://127.0.0.1.example.com:8080", false, true}, // a name, not a loopback address
		{"http://localhost.evil:8080", false, true},
		{"http://127.0.0.1:8080", false, false},
		{"http://127.8.9.10:8080", false, false},
		{"http://[::1]:8080", false, false},
		{"http://localhost:8080", false, false},
		{"http://LOCALHOST:8080", false, false},
		{"http://registry:8080", true, false},
		{"ftp://registry:8080", true, true},
	} {
		c := replicaConfig()
		c.RegistryURL, c.RegistryInsecureHTTP = tc.url, tc.optIn
		err := c.Validate()
		if refused := err != nil && strings.Contains(err.Error(), "registryURL"); refused != tc.refuse {
			t.Errorf("registryURL %s (registryInsecureHTTP %v): refused %v, want %v: %v", tc.url, tc.optIn, refused, tc.refuse, err)
		}
	}
}

// Rule: the plain-http refusal is one of every problem reported at once,
// with its line in the file, and names the way out.
func TestPlainHTTPRegistryURLIsReportedWithItsLineAndTheOtherProblems(t *testing.T) {
	c, err := loadFile(t, `trustBundle: /b.json
statusMode: maybe
registryURL: http://registry:8080
registryCredential: {name: gw, token: g}
identities: [{name: w, token: t}]
`)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil {
		t.Fatal("plain http registryURL accepted")
	}
	for _, want := range []string{"c.yaml:2: statusMode must be", `c.yaml:3: registryURL "http://registry:8080" is plain http`, "registryInsecureHTTP: true"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// Rule: the start-up warning is due exactly when a non-loopback http URL
// is let through by the opt-in.
func TestInsecureRegistryHTTPIsAPlainURLToANonLoopbackHost(t *testing.T) {
	for url, want := range map[string]bool{"http://registry:8080": true, "http://127.0.0.1:1": false, "https://registry": false} {
		c := replicaConfig()
		c.RegistryURL = url
		if got := c.InsecureRegistryHTTP(); got != want {
			t.Errorf("%s: InsecureRegistryHTTP %v, want %v", url, got, want)
		}
	}
}

// Rule: registryCA is a readable PEM file of CA certificates for an
// https:// registryURL; the options of registryURL need one.
func TestRegistryCAMustBeAPEMFileForAnHTTPSRegistryURL(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "ca.pem")
	writeCA(t, good)
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := replicaConfig()
	c.RegistryCA = good
	if err := c.Validate(); err != nil {
		t.Fatalf("a PEM CA for an https registryURL refused: %v", err)
	}
	if pool, err := c.RegistryRootCAs(); err != nil || pool == nil {
		t.Fatalf("RegistryRootCAs: %v, %v", pool, err)
	}
	for name, mod := range map[string]func(*Config){
		"missing file":         func(c *Config) { c.RegistryCA = filepath.Join(dir, "absent.pem") },
		"no PEM certificate":   func(c *Config) { c.RegistryCA = junk },
		"http registryURL":     func(c *Config) { c.RegistryCA, c.RegistryURL = good, "http://127.0.0.1:8080" },
		"no registryURL (CA)":  func(c *Config) { c.RegistryCA, c.RegistryURL = good, "" },
		"no registryURL (opt)": func(c *Config) { c.RegistryInsecureHTTP, c.RegistryURL = true, "" },
	} {
		c := replicaConfig()
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func writeCA(t *testing.T, path string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Rule: the deploy kit's replica configs validate: their plain http
// registryURL (the kit's registry serves no TLS) carries the explicit
// opt-in for the private network.
func TestShippedReplicaConfigsOptInToPlainHTTPExplicitly(t *testing.T) {
	for _, env := range []string{"FENCEGATE_WORKER_TOKEN", "FENCEGATE_ADMIN_TOKEN", "FENCEGATE_REPLICA_TOKEN"} {
		t.Setenv(env, env+"-value")
	}
	for _, path := range []string{"../deploy/compose/gateway.yaml", "../deploy/kube/base/config/gateway.yaml"} {
		c := Default()
		if err := Load(path, &c); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", path, err)
		}
		if c.InsecureRegistryHTTP() && !c.RegistryInsecureHTTP {
			t.Errorf("%s: plain http registryURL %s without registryInsecureHTTP", path, c.RegistryURL)
		}
	}
}

// Rule: a replica fetching its trust bundle from registryURL does so more
// often than a status proof lives (5 s by default), so that a revocation at
// the registry reaches it within one proof life, as DESIGN promises; a
// longer bundleRefresh is refused, one below it accepted.
func TestBundleRefreshOfAReplicaIsBelowAStatusProofLife(t *testing.T) {
	for refresh, ok := range map[time.Duration]bool{time.Second: true, 4900 * time.Millisecond: true,
		fencegate.DefaultStatusLife: false, 10 * time.Minute: false} {
		c := replicaConfig()
		c.BundleRefresh = refresh
		err := c.Validate()
		if ok != (err == nil || !strings.Contains(err.Error(), "bundleRefresh")) {
			t.Errorf("bundleRefresh %s: %v (accepted: want %v)", refresh, err, ok)
		}
	}
}
