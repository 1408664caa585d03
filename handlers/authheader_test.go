package handlers_test

import (
	"net/http"
	"testing"

	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
)

// Rule: a request with more than one Authorization line is UNAUTHENTICATED
// whatever the lines say (a proxy or log reading the last line would see
// another caller than the first line names), and nothing changes: no
// receipt, no moved fence, no object written or read.
func TestTwoAuthorizationLinesAreRefusedWithoutStateChange(t *testing.T) {
	e := newEnv(t)
	c := e.grant("local/inv/7", ownerA, 1, nil)
	before := e.snap("local/inv/7", "inv/7")
	for _, lines := range [][]string{
		{"Bearer " + tokA, "Bearer nope"},
		{"Bearer nope", "Bearer " + tokA},
		{"Bearer " + tokA, "Bearer " + tokA},
		{"", "Bearer " + tokA},
	} {
		hdr := http.Header{"Authorization": lines, "Fence-Grant": {c.grant}, "Fence-Status": {c.status}, "Fence-Segment": {"1"}}
		wantProblem(t, e.doHeader("PUT", "/v1/objects/local/inv/7", "", hdr, "body"), http.StatusUnauthorized, "UNAUTHENTICATED")
		if after := e.snap("local/inv/7", "inv/7"); after != before {
			t.Fatalf("Authorization %q changed the state: %+v -> %+v", lines, before, after)
		}
		wantProblem(t, e.doHeader("GET", "/v1/objects/local/inv/7", "", http.Header{"Authorization": lines}, ""),
			http.StatusUnauthorized, "UNAUTHENTICATED")
	}
	if r := e.put(tokA, c, "local/inv/7", 1, "body"); r.status != http.StatusOK {
		t.Fatalf("the same write with one Authorization line: %d %s", r.status, r.body)
	}
}

// Rule: the admin API reads its bearer credential the same way: two
// Authorization lines are UNAUTHENTICATED, even both naming an admin, and
// the admin action is not taken.
func TestTwoAuthorizationLinesAreRefusedByTheAdminAPI(t *testing.T) {
	modes, _ := gateway.NewModes(gateway.ModeRule{Pattern: "local/roll/*", Mode: gateway.Enforce})
	e := newEnvWith(t, func(s *handlers.Server) { s.Admin = modesAdmin{modes: modes} })
	body := `{"pattern":"local/new/*","mode":"enforce"}`
	for _, lines := range [][]string{{"Bearer ops", "Bearer " + tokA}, {"Bearer " + tokA, "Bearer ops"}, {"Bearer ops", "Bearer ops"}} {
		r := e.doHeader("PUT", "/v1/admin/modes", "", http.Header{"Authorization": lines}, body)
		wantProblem(t, r, http.StatusUnauthorized, "UNAUTHENTICATED")
		if n := len(modes.Rules()); n != 1 {
			t.Fatalf("Authorization %q: the mode was set (%d rules)", lines, n)
		}
	}
	if r := e.do("PUT", "/v1/admin/modes", "ops", nil, body); r.status != http.StatusOK || len(modes.Rules()) != 2 {
		t.Fatalf("the same change with one Authorization line: %d %s", r.status, r.body)
	}
}

// Rule: an empty first Authorization line does not hide a second one from
// the console: the request is authenticated by its header lines (and
// refused, two lines), not by its session cookie.
func TestConsoleDoesNotTakeTheSessionWhenAnAuthorizationLineIsHidden(t *testing.T) {
	e := newEnv(t)
	cookie := e.login()
	req := http.Header{"Cookie": {cookie}, "Authorization": {"", "Bearer " + tokA}}
	r := e.doHeader("GET", "/console/", "", req, "")
	if r.status != http.StatusUnauthorized {
		t.Fatalf("a session with a hidden second Authorization line: %d %s", r.status, r.body)
	}
	if r := e.doHeader("GET", "/console/", "", http.Header{"Cookie": {cookie}, "Authorization": {""}}, ""); r.status != http.StatusOK {
		t.Fatalf("a session with one empty Authorization line: %d", r.status)
	}
}
