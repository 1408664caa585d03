package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// TestTheBinaryRefusesAnUploadLongerThanTheLimitAsServed: the built
// gateway, run as a registry, answers an operator's PUT /v1/admin/trust-bundle
// whose document is within proofs.MaxBundleSize as sent but longer once
// served (Marshal writes each '<' as six bytes) with 400 problem+json
// INVALID_REQUEST naming the limit, and changes nothing: the bundle and
// signature replicas fetch, the version in force, and the bundle and
// signature files are as they were.
func TestTheBinaryRefusesAnUploadLongerThanTheLimitAsServed(t *testing.T) {
	dir := t.TempDir()
	reg := startGateway(t, "dev", "--data-dir", dir, "--identity", "worker-a=token-a",
		"--gateway", "replica=replica-token", "--admin-token", "ops-token")
	bundleFile := filepath.Join(dir, "trust-bundle.json")
	files := func() [2][]byte {
		var out [2][]byte
		for i, f := range []string{bundleFile, bundleFile + ".sig"} {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = b
		}
		return out
	}
	fetched := func() (string, string) {
		a := reg.do(t, "GET", "/v1/trust-bundle", "replica-token", nil, "")
		if a.status != http.StatusOK {
			t.Fatalf("GET /v1/trust-bundle: %d %s", a.status, a.body)
		}
		return string(a.body), a.header.Get(fencegate.BundleSignatureHeader)
	}
	doc, sig := fetched()
	onDisk := files()
	cur, err := proofs.ParseBundle([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := prooftest.OverServedDoc(t, cur)

	put := reg.do(t, "PUT", "/v1/admin/trust-bundle", "ops-token", nil, string(raw))
	wantCode(t, put, http.StatusBadRequest, "INVALID_REQUEST")
	if !strings.Contains(string(put.body), fmt.Sprint(proofs.MaxBundleSize)) {
		t.Fatalf("the refusal does not name the limit: %s", put.body)
	}
	if d, s := fetched(); d != doc || s != sig {
		t.Fatal("replicas are served another bundle or signature after the refused upload")
	}
	if st := reg.do(t, "GET", "/v1/admin/state", "ops-token", nil, ""); st.num("trustBundleVersion") != cur.Version() {
		t.Fatalf("the version in force moved: %s", st.body)
	}
	if now := files(); !bytes.Equal(now[0], onDisk[0]) || !bytes.Equal(now[1], onDisk[1]) {
		t.Fatal("the refused upload changed the bundle or signature file")
	}
}
