package handlers_test

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/handlers"
)

// certIdentity authenticates a request whose verified chain ends in leaf.
func certIdentity(t *testing.T, leaf *x509.Certificate) (string, error) {
	t.Helper()
	r := httptest.NewRequest("GET", "/", nil)
	r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}
	return handlers.ClientCerts{}.Authenticate(r)
}

// Rule: a certificate's CN is free text, so a CN identity never passes for a
// URI SAN: a certificate with no URI SAN and a CN spelled like a SPIFFE ID
// is the identity "cn:<CN>", which no san pattern names (an identity rule
// for "cn:<CN>" does); a real URI SAN still matches the san pattern.
func TestCNIdentityNeverMatchesASANPattern(t *testing.T) {
	p, err := authz.New([]authz.Rule{
		{SAN: "spiffe://acme/billing/*", Lease: []string{"payouts/*"}},
		{SAN: "*", Read: []string{"reports"}},
		{Identity: "cn:batch-runner", Lease: []string{"batch/*"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	spoof, err := certIdentity(t, &x509.Certificate{Subject: pkix.Name{CommonName: "spiffe://acme/billing/anything"},
		DNSNames: []string{"host.acme.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	if spoof != "cn:spiffe://acme/billing/anything" {
		t.Errorf("CN identity %q, want cn:spiffe://acme/billing/anything", spoof)
	}
	if p.MayLease(spoof, "payouts/p1") {
		t.Errorf("a certificate with no URI SAN (identity %q) may lease under the san rule", spoof)
	}
	if p.MayRead(spoof, "reports") {
		t.Errorf("a CN identity %q is named by the san pattern *", spoof)
	}

	spiffe, _ := url.Parse("spiffe://acme/billing/worker-1")
	real, err := certIdentity(t, &x509.Certificate{Subject: pkix.Name{CommonName: "ignored"}, URIs: []*url.URL{spiffe}})
	if err != nil {
		t.Fatal(err)
	}
	if real != "spiffe://acme/billing/worker-1" || !p.MayLease(real, "payouts/p1") {
		t.Errorf("a certificate with the URI SAN %s (identity %q) may not lease under the san rule", spiffe, real)
	}

	cn, err := certIdentity(t, &x509.Certificate{Subject: pkix.Name{CommonName: "batch-runner"}})
	if err != nil || !p.MayLease(cn, "batch/b1") {
		t.Errorf("a CN identity named by an identity rule: %q, %v", cn, err)
	}
}

// Rule: a URI SAN of the scheme cn: is refused (UNAUTHENTICATED), so no URI
// SAN spells a CN identity.
func TestURISANWithTheCNSchemeIsRefused(t *testing.T) {
	for _, raw := range []string{"cn:batch-runner", "CN:batch-runner"} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		id, err := certIdentity(t, &x509.Certificate{URIs: []*url.URL{u}})
		if fencegate.ErrorCode(err) != fencegate.CodeUnauthenticated {
			t.Errorf("URI SAN %s: identity %q, %v; want UNAUTHENTICATED", raw, id, err)
		}
	}
}

// Rule: a certificate's URI SAN is refused exactly when it would read as a CN
// identity (authz.IsCNIdentity): crypto/x509 lowercases a URI SAN's scheme,
// so one written CN: or Cn: in the certificate is refused as cn: is, while a
// URI SAN merely containing cn: is an identity like any other.
func TestURISANIsRefusedExactlyWhenItReadsAsACNIdentity(t *testing.T) {
	for _, c := range []struct {
		san     *url.URL
		refused bool
	}{
		{&url.URL{Scheme: "cn", Opaque: "batch-runner"}, true},
		{&url.URL{Scheme: "CN", Opaque: "batch-runner"}, true},
		{&url.URL{Scheme: "Cn", Opaque: "batch-runner"}, true},
		{&url.URL{Scheme: "spiffe", Host: "acme", Path: "/cn:batch-runner"}, false},
		{&url.URL{Scheme: "urn", Opaque: "cn:batch-runner"}, false},
	} {
		leaf, _ := issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "batch-runner"}, URIs: []*url.URL{c.san}}, nil, nil)
		id, err := certIdentity(t, leaf)
		if refused := fencegate.ErrorCode(err) == fencegate.CodeUnauthenticated; refused != c.refused {
			t.Errorf("URI SAN written %s: identity %q, %v; refused %v, want %v", c.san, id, err, refused, c.refused)
		}
		if err == nil && (authz.IsCNIdentity(id) || id != leaf.URIs[0].String()) {
			t.Errorf("URI SAN written %s: identity %q, want the URI SAN, and no CN identity", c.san, id)
		}
	}
}
