package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// Rule: an operator's PUT /v1/admin/trust-bundle whose document is within
// proofs.MaxBundleSize as sent but longer as the registry would serve it
// (Bundle.Marshal writes each '<' as six bytes) is answered as
// problem+json with the stable code INVALID_REQUEST (400) naming the
// limit, and a replica is answered as before: it used to be taken and
// served at several times the limit, which no replica reads.
func TestAnUploadLongerThanTheLimitAsServedIsAProblemAndChangesNothing(t *testing.T) {
	a, _, call, served := uploadRegistry(t)
	if _, err := a.auth.RotateKey(context.Background()); err != nil { // a chain to answer: 1 to 2
		t.Fatal(err)
	}
	before := served()
	cur := a.auth.Verifier().Bundle()
	raw, _ := prooftest.OverServedDoc(t, cur)

	resp, body := call("PUT", "/v1/admin/trust-bundle", "token-admin", string(raw))
	var p problem
	if err := json.Unmarshal([]byte(body), &p); err != nil || resp.StatusCode != http.StatusBadRequest ||
		resp.Header.Get("Content-Type") != "application/problem+json" ||
		p.Code != fencegate.CodeInvalidRequest || p.Status != 400 || !strings.Contains(p.Detail, fmt.Sprint(proofs.MaxBundleSize)) {
		t.Fatalf("upload served over the limit: %d %s %.300s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if after := served(); after != before {
		t.Fatal("a replica is answered otherwise after a refused upload")
	}
	if a.auth.Verifier().Bundle().Version() != cur.Version() {
		t.Fatal("the refused upload is in force")
	}
}
