package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type testCert struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCert(t *testing.T, tmpl *x509.Certificate, parent *testCert) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	signer, signKey := tmpl, key
	if parent != nil {
		signer, signKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signKey)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return testCert{c, key}
}

func (c testCert) write(t *testing.T, certPath, keyPath string) {
	t.Helper()
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if keyPath != "" {
		der, _ := x509.MarshalECPrivateKey(c.key)
		if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMTLSIdentityIsTheClientCertificate: with auth mtls the workload identity
// is the verified client certificate's URI SAN; a grant owned by it is
// accepted, a request without a certificate is UNAUTHENTICATED.
func TestMTLSIdentityIsTheClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := newCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "fencegate test CA"}, IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}, nil)
	server := newCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "gateway"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, &ca)
	id, _ := url.Parse("spiffe://test/worker-a")
	worker := newCert(t, &x509.Certificate{Subject: pkix.Name{CommonName: "worker"}, URIs: []*url.URL{id},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, &ca)
	ca.write(t, filepath.Join(dir, "ca.pem"), "")
	server.write(t, filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"))
	cfg := filepath.Join(dir, "gw.yaml")
	// The access policy names mTLS identities by a SAN pattern.
	yml := fmt.Sprintf("auth: mtls\ntls: {cert: %s, key: %s, clientCA: %s}\n"+
		"access: {rules: [{san: \"spiffe://test/*\", lease: [\"local/m/*\"]}]}\n", filepath.Join(dir, "server.pem"),
		filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.pem"))
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	logs := &bytes.Buffer{}
	cmd := exec.Command(binary(t), "dev", "--config", cfg, "--data-dir", filepath.Join(dir, "data"), "--addr", addr)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &gatewayProc{cmd: cmd, base: "https://" + addr, logs: logs}
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("gateway output:\n%s", logs.String())
		}
	})
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	mk := func(withCert bool) *http.Client {
		tc := &tls.Config{RootCAs: roots}
		if withCert {
			tc.Certificates = []tls.Certificate{{Certificate: [][]byte{worker.cert.Raw}, PrivateKey: worker.key}}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	}
	certified, anonymous := mk(true), mk(false)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := anonymous.Get(p.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway never answered over TLS: %v\n%s", err, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	send := func(c *http.Client, method, path string, hdr map[string]string, body string) (int, map[string]any) {
		req, _ := http.NewRequest(method, p.base+path, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return resp.StatusCode, m
	}
	code, l := send(certified, "POST", "/v1/leases", nil, `{"resource":"local/m/1","requestId":"r1","ttlMs":60000,"operationId":"m"}`)
	if code != 201 || l["owner"] != "spiffe://test/worker-a" {
		t.Fatalf("acquire over mTLS: %d %v", code, l)
	}
	if code, r := send(certified, "POST", "/v1/leases", nil, `{"resource":"local/other","requestId":"r2","ttlMs":60000,"operationId":"m"}`); code != 403 || r["code"] != "FORBIDDEN" {
		t.Fatalf("acquire outside the SAN pattern's resources: %d %v", code, r)
	}
	hdr := map[string]string{"Fence-Grant": l["grant"].(string), "Fence-Status": l["statusProof"].(string), "Fence-Segment": "1"}
	if code, r := send(certified, "PUT", "/v1/objects/local/m/1", hdr, "x"); code != 200 {
		t.Fatalf("write over mTLS: %d %v", code, r)
	}
	if code, r := send(anonymous, "PUT", "/v1/objects/local/m/1", hdr, "y"); code != 401 || r["code"] != "UNAUTHENTICATED" {
		t.Fatalf("write without a certificate: %d %v", code, r)
	}
}
