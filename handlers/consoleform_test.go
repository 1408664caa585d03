package handlers_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
)

// newAuthorityEnv is newEnv whose operator state is a real signing
// authority (package authority) in a temporary directory, logging to the
// env's log, with the given configured modes.
func newAuthorityEnv(t *testing.T, mod func(*handlers.Server), modes ...gateway.ModeRule) (*env, *authority.Authority) {
	t.Helper()
	var a *authority.Authority
	e := newEnvWith(t, func(s *handlers.Server) {
		dir := t.TempDir()
		var err error
		a, err = authority.Open(authority.Config{Signing: true, KeyID: "registry-1", IssuerEpoch: 1, PolicyGeneration: 1,
			Modes: modes, Log: s.Log.With(slog.String("from", "authority")),
			Files: authority.Files{State: filepath.Join(dir, "authority.json"), Bundle: filepath.Join(dir, "trust-bundle.json"), Key: filepath.Join(dir, "key")}})
		if err != nil {
			t.Fatal(err)
		}
		s.Admin = a
		if mod != nil {
			mod(s)
		}
	})
	return e, a
}

// adminSnap is the operator state an admin refusal must leave unchanged:
// epochs, revocations, policy generation, bundle and modes, and the bundle.
func adminSnap(t *testing.T, a *authority.Authority) string {
	t.Helper()
	st, err := a.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(st)
	bundle, err := a.TrustBundle(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return string(b) + "\n" + string(bundle)
}

// Rule: a console form that gives a field more than once is INVALID_REQUEST
// before anything is done, as the JSON admin routes refuse a duplicate
// member: no mode changes (no break-glass, logged or not), no receipt is
// resolved, no session is made. Read as its first value, a doubled
// breakGlass=yes&breakGlass=no switched a pattern to shadow with
// break-glass on.
func TestAConsoleFormFieldGivenTwiceIsRefusedAndChangesNothing(t *testing.T) {
	e, a := newAuthorityEnv(t, nil, gateway.ModeRule{Pattern: "local/x/*", Mode: gateway.Enforce})
	c := e.grant(res7, ownerA, 5, nil)
	e.objects.lose.Store(true)
	lost := e.put(tokA, c, "local/inv/7", 1, "v1")
	wantProblem(t, lost, 502, "MUTATION_UNKNOWN")
	id, _ := lost.json["receiptId"].(string)
	receipt := func() fencegate.Receipt {
		rc, err := e.store.Receipt(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return rc
	}
	cookie := e.login()
	hdr := map[string]string{"Cookie": cookie, "Sec-Fetch-Site": "same-origin"}
	resolve := "/console/unknown/" + id + "/resolve"
	before, rcBefore := adminSnap(t, a), receipt()
	logsBefore := e.logs.String()

	for _, tc := range []struct {
		name, path string
		form       url.Values
	}{
		{"breakGlass twice", "/console/modes", url.Values{"pattern": {"local/x/*"}, "mode": {"shadow"}, "breakGlass": {"yes", "no"}}},
		{"breakGlass twice, no first", "/console/modes", url.Values{"pattern": {"local/x/*"}, "mode": {"shadow"}, "breakGlass": {"no", "yes"}}},
		{"mode twice", "/console/modes", url.Values{"pattern": {"local/x/*"}, "mode": {"shadow", "enforce"}, "breakGlass": {"yes"}}},
		{"pattern twice", "/console/modes", url.Values{"pattern": {"local/x/*", "local/y/*"}, "mode": {"shadow"}, "breakGlass": {"yes"}}},
		{"state twice", resolve, url.Values{"state": {"NOT_APPLIED", "COMMITTED"}, "confirm": {"yes"}}},
		{"confirm twice", resolve, url.Values{"state": {"NOT_APPLIED"}, "confirm": {"yes", "no"}}},
		{"note twice", resolve, url.Values{"state": {"NOT_APPLIED"}, "note": {"a", "b"}, "confirm": {"yes"}}},
		{"token twice", "/console/login", url.Values{"token": {consoleSecret, "not-a-token"}, "next": {"/console/modes"}}},
	} {
		h := hdr
		if tc.path == "/console/login" {
			h = sameOrigin // no session: a doubled token must not make one
		}
		resp, body := e.page("POST", tc.path, h, tc.form)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "INVALID_REQUEST") || !strings.Contains(body, "more than once") {
			t.Fatalf("%s: want 400 INVALID_REQUEST, got %d\n%s", tc.name, resp.StatusCode, body)
		}
		for _, ck := range resp.Cookies() {
			if ck.Name == "fencegate_console" && ck.Value != "" {
				t.Fatalf("%s: a session was made", tc.name)
			}
		}
		if after := adminSnap(t, a); after != before {
			t.Fatalf("%s changed the operator state:\n%s\n->\n%s", tc.name, before, after)
		}
		if a.Modes().For("local/x/1") != gateway.Enforce {
			t.Fatalf("%s: local/x/* left enforce", tc.name)
		}
		if rc := receipt(); rc.State != fencegate.ReceiptUnknown || rc.Error != rcBefore.Error {
			t.Fatalf("%s: the receipt changed: %s %q", tc.name, rc.State, rc.Error)
		}
		if logs := strings.TrimPrefix(e.logs.String(), logsBefore); strings.Contains(logs, "BREAK-GLASS") ||
			strings.Contains(logs, "mode changed") || strings.Contains(logs, "operator resolved") || strings.Contains(logs, `msg="console login"`) {
			t.Fatalf("%s: logged as done:\n%s", tc.name, logs)
		}
	}
	// Each field once, the same actions go through.
	if resp, body := e.page("POST", "/console/modes", hdr, url.Values{"pattern": {"local/x/*"}, "mode": {"shadow"}, "breakGlass": {"yes"}}); resp.StatusCode != http.StatusSeeOther ||
		a.Modes().For("local/x/1") != gateway.Shadow || !strings.Contains(e.logs.String(), "BREAK-GLASS") {
		t.Fatalf("set mode once: %d, mode %s\n%s", resp.StatusCode, a.Modes().For("local/x/1"), body)
	}
	if resp, _ := e.page("POST", resolve, hdr, url.Values{"state": {"NOT_APPLIED"}, "confirm": {"yes"}}); resp.StatusCode != http.StatusSeeOther ||
		receipt().State != fencegate.ReceiptNotApplied {
		t.Fatalf("resolve once: %d, receipt %s", resp.StatusCode, receipt().State)
	}
}
