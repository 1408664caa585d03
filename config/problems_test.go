package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Rule: an identity gives its token one way; two sources (a token and a
// file, say) are refused, not resolved by a precedence nobody wrote down.
func TestAnIdentityWithTwoTokenSourcesIsRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(p, []byte("file-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Dev()
	c.Identities = []Identity{{Name: "a", Token: "inline-token", TokenFile: p}}
	if _, err := c.Tokens(); err == nil || !strings.Contains(err.Error(), `identity "a"`) {
		t.Fatalf("an identity with a token and a token file: %v", err)
	}
}

// Rule: every bad mode rule is reported with its line, not only the first.
func TestEveryBadModeRuleIsReportedWithItsLine(t *testing.T) {
	c, err := loadFile(t, `modes:
  - {pattern: "a/[", mode: shadow}
  - {pattern: "b/*", mode: enforce}
  - {pattern: "c/*", mode: bogus}
`)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	for _, want := range []string{"c.yaml:2: ", "c.yaml:4: "} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks a problem at %q:\n%v", want, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "c.yaml:3: ") {
		t.Errorf("the good rule was reported:\n%v", err)
	}
}

// Rule: s3StagingBytes, when set, holds an upload of the largest object
// (maxBodyBytes) and a part of it sent again, reported with the other
// problems; unset, the budget is 32 GiB or twice maxBodyBytes, so a
// configuration that raised maxBodyBytes keeps working.
func TestStagingSmallerThanTwiceTheLargestObjectIsRefused(t *testing.T) {
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	if c.S3StagingBytes != 0 || c.StagingBytes() != 32<<30 {
		t.Fatalf("default s3StagingBytes %d (budget %d), want unset and 32 GiB", c.S3StagingBytes, c.StagingBytes())
	}
	c.MaxBodyBytes = 64 << 30
	if err := c.Validate(); err != nil || c.StagingBytes() != 128<<30 {
		t.Fatalf("maxBodyBytes 64 GiB, s3StagingBytes unset: %v, budget %d", err, c.StagingBytes())
	}
	c.MaxBodyBytes, c.S3StagingBytes = 8<<30, 12<<30
	c.Addr = ""
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "s3StagingBytes must be at least twice maxBodyBytes") || !strings.Contains(err.Error(), "addr is required") {
		t.Fatalf("want the staging problem beside the others, got %v", err)
	}
	c.Addr, c.S3StagingBytes = "127.0.0.1:1", 16<<30
	if err := c.Validate(); err != nil || c.StagingBytes() != 16<<30 {
		t.Fatalf("s3StagingBytes twice maxBodyBytes: %v, budget %d", err, c.StagingBytes())
	}
}

// Rule: with auth mtls an access rule's identity is a certificate's URI SAN
// or cn:NAME (its common name); a bare name, which no certificate presents
// (a CN was the bare name before), is refused with its line and the fix,
// not left to refuse every request.
func TestAnMTLSIdentityRuleWithABareNameIsRefused(t *testing.T) {
	c, err := loadFile(t, `auth: mtls
tls: {cert: c.pem, key: k.pem, clientCA: ca.pem}
access:
  rules:
    - {identity: batch-runner, lease: ["local/*"]}
    - {identity: "cn:batch-runner", lease: ["local/*"]}
    - {identity: "spiffe://acme/billing/w", lease: ["local/*"]}
    - {san: "spiffe://acme/*", lease: ["local/*"]}
`)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), `c.yaml:5: identity "batch-runner" names no mTLS identity`) ||
		!strings.Contains(err.Error(), "cn:batch-runner for one without") {
		t.Fatalf("want the bare name refused with its line and the fix, got %v", err)
	}
	for _, line := range []string{"c.yaml:6:", "c.yaml:7:", "c.yaml:8:"} {
		if strings.Contains(err.Error(), line) {
			t.Errorf("a rule naming a real mTLS identity was refused (%s):\n%v", line, err)
		}
	}
}

// Rule: with auth mtls a rule identity must read as a certificate's URI SAN
// does (net/url's form, its scheme in lower case): "SPIFFE://..." or
// "CN:name" would match no client certificate, so each is refused with its
// line and the spelling that would match, not left to refuse everything.
func TestAnMTLSIdentityRuleNoCertificateCanPresentIsRefused(t *testing.T) {
	c, err := loadFile(t, `auth: mtls
tls: {cert: c.pem, key: k.pem, clientCA: ca.pem}
access:
  rules:
    - {identity: "SPIFFE://acme/billing/w", lease: ["local/*"]}
    - {identity: "CN:batch-runner", lease: ["local/*"]}
    - {identity: "cn:Batch Runner", lease: ["local/*"]}
    - {identity: "spiffe://acme/billing/w", lease: ["local/*"]}
    - {identity: "urn:x:Upper", lease: ["local/*"]}
`)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil {
		t.Fatal("rule identities no certificate presents were accepted")
	}
	for _, want := range []string{
		`c.yaml:5: identity "SPIFFE://acme/billing/w" matches no client certificate`, `write "spiffe://acme/billing/w"`,
		`c.yaml:6: identity "CN:batch-runner" matches no client certificate`, `write "cn:batch-runner"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in\n%v", want, err)
		}
	}
	for _, line := range []string{"c.yaml:7:", "c.yaml:8:", "c.yaml:9:"} {
		if strings.Contains(err.Error(), line) {
			t.Errorf("a rule naming a real mTLS identity was refused (%s):\n%v", line, err)
		}
	}
}

// Rule: s3StagingBytesPerIdentity, when set, holds an upload of the largest
// object and a part of it sent again (at least twice maxBodyBytes) and is at
// most the staging budget, each problem reported with the others; unset,
// an identity's share is a quarter of the budget, at least twice
// maxBodyBytes and at most the budget.
func TestAnIdentitysStagingShareOutsideItsBoundsIsRefused(t *testing.T) {
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	for _, d := range []struct {
		maxBody, staging, want int64
	}{
		{5 << 30, 0, 10 << 30},        // 32 GiB budget: a quarter is 8 GiB, below twice 5 GiB
		{1 << 30, 0, 8 << 30},         // a quarter of 32 GiB
		{1 << 30, 64 << 30, 16 << 30}, // a quarter of 64 GiB
		{64 << 30, 0, 128 << 30},      // twice maxBodyBytes is the whole budget
		{1 << 20, 3 << 20, 2 << 20},   // at least 2 MiB, however small maxBodyBytes
	} {
		c.MaxBodyBytes, c.S3StagingBytes, c.S3StagingBytesPerIdentity = d.maxBody, d.staging, 0
		if err := c.Validate(); err != nil || c.StagingBytesPerIdentity() != d.want {
			t.Fatalf("maxBodyBytes %d, s3StagingBytes %d, share unset: %v, share %d, want %d", d.maxBody, d.staging, err, c.StagingBytesPerIdentity(), d.want)
		}
	}
	c.MaxBodyBytes, c.S3StagingBytes, c.S3StagingBytesPerIdentity = 5<<30, 0, 9<<30
	c.Addr = ""
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "s3StagingBytesPerIdentity must be at least twice maxBodyBytes and 2 MiB (10737418240), not 9663676416") || !strings.Contains(err.Error(), "addr is required") {
		t.Fatalf("want the too small share beside the others, got %v", err)
	}
	c.S3StagingBytesPerIdentity = -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "s3StagingBytesPerIdentity must be at least") {
		t.Fatalf("a negative share: %v", err)
	}
	c.Addr, c.S3StagingBytesPerIdentity = "127.0.0.1:1", 33<<30
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), "s3StagingBytesPerIdentity must be at most the staging budget s3StagingBytes (34359738368), not 35433480192") {
		t.Fatalf("a share above the default budget: %v", err)
	}
	c.S3StagingBytes = 33 << 30 // the budget raised to it
	if err := c.Validate(); err != nil || c.StagingBytesPerIdentity() != 33<<30 {
		t.Fatalf("a share of the whole budget: %v, share %d", err, c.StagingBytesPerIdentity())
	}
	c.S3StagingBytesPerIdentity = 10 << 30
	if err := c.Validate(); err != nil || c.StagingBytesPerIdentity() != 10<<30 {
		t.Fatalf("a share of twice maxBodyBytes: %v, share %d", err, c.StagingBytesPerIdentity())
	}
}
