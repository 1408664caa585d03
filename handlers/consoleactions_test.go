package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/handlers"
)

func TestConsoleResolvesAnUnknownOnlyAfterConfirmationAndLogsTheAudit(t *testing.T) {
	e := newEnv(t)
	a := e.grant(res7, ownerA, 5, nil)
	e.objects.lose.Store(true)
	lost := e.put(tokA, a, "local/inv/7", 1, "v1")
	wantProblem(t, lost, 502, "MUTATION_UNKNOWN")
	id, _ := lost.json["receiptId"].(string)
	cookie := e.login()
	state := func() fencegate.ReceiptState {
		rc, err := e.store.Receipt(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return rc.State
	}
	_, list := e.page("GET", "/console/unknown", map[string]string{"Cookie": cookie}, nil)
	if !strings.Contains(list, `data-receipt="`+id+`"`) {
		t.Fatalf("unknown list lacks %s:\n%s", id, list)
	}
	path := "/console/unknown/" + id + "/resolve"
	hdr := map[string]string{"Cookie": cookie, "Sec-Fetch-Site": "same-origin"}
	resp, body := e.page("POST", path, hdr, url.Values{"state": {"NOT_APPLIED"}, "note": {"checked the bucket"}})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="confirm-resolve"`) || state() != fencegate.ReceiptUnknown {
		t.Fatalf("first step: %d, receipt %s\n%s", resp.StatusCode, state(), body)
	}
	// A cross-site form cannot take the second step.
	resp, _ = e.page("POST", path, map[string]string{"Cookie": cookie, "Sec-Fetch-Site": "cross-site"},
		url.Values{"state": {"NOT_APPLIED"}, "confirm": {"yes"}})
	if resp.StatusCode != http.StatusForbidden || state() != fencegate.ReceiptUnknown {
		t.Fatalf("cross-site confirm: %d, receipt %s", resp.StatusCode, state())
	}
	// COMMITTED is refused: the object does not carry the receipt.
	resp, _ = e.page("POST", path, hdr, url.Values{"state": {"COMMITTED"}, "confirm": {"yes"}})
	if resp.StatusCode != http.StatusBadRequest || state() != fencegate.ReceiptUnknown {
		t.Fatalf("COMMITTED for a write that never landed: %d, receipt %s", resp.StatusCode, state())
	}
	resp, _ = e.page("POST", path, hdr, url.Values{"state": {"NOT_APPLIED"}, "note": {"checked the bucket"}, "confirm": {"yes"}})
	if resp.StatusCode != http.StatusSeeOther || state() != fencegate.ReceiptNotApplied {
		t.Fatalf("confirmed: %d, receipt %s", resp.StatusCode, state())
	}
	rc, _ := e.store.Receipt(context.Background(), id)
	if !strings.Contains(rc.Error, "admin:operator") || !strings.Contains(rc.Error, "checked the bucket") {
		t.Fatalf("receipt note %q lacks the operator and the note", rc.Error)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "audit: operator resolved an UNKNOWN receipt") || !strings.Contains(logs, "receipt="+id) {
		t.Fatalf("no audit line:\n%s", logs)
	}
}

// modesAdmin is the part of handlers.Admin the modes page uses, over real Modes.
type modesAdmin struct {
	handlers.Admin
	modes *gateway.Modes
}

func (m modesAdmin) SetMode(_ context.Context, r gateway.ModeRule, breakGlass bool) (handlers.AdminState, error) {
	return handlers.AdminState{}, m.modes.Set(r.Pattern, r.Mode, breakGlass)
}

func TestConsoleModeSwitchToShadowNeedsBreakGlass(t *testing.T) {
	e := newEnv(t)
	modes, _ := gateway.NewModes(gateway.ModeRule{Pattern: "local/roll/*", Mode: gateway.Enforce})
	e.srv.Admin = modesAdmin{modes: modes}
	cookie := e.login()
	hdr := map[string]string{"Cookie": cookie, "Sec-Fetch-Site": "same-origin"}
	resp, body := e.page("POST", "/console/modes", hdr, url.Values{"pattern": {"local/roll/*"}, "mode": {"shadow"}})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "break-glass") || modes.For("local/roll/x") != gateway.Enforce {
		t.Fatalf("shadow without break-glass: %d, mode %s\n%s", resp.StatusCode, modes.For("local/roll/x"), body)
	}
	// A cross-site form cannot switch it, even with the break-glass box.
	resp, _ = e.page("POST", "/console/modes", map[string]string{"Cookie": cookie, "Sec-Fetch-Site": "cross-site"},
		url.Values{"pattern": {"local/roll/*"}, "mode": {"shadow"}, "breakGlass": {"yes"}})
	if resp.StatusCode != http.StatusForbidden || modes.For("local/roll/x") != gateway.Enforce {
		t.Fatalf("cross-site shadow with break-glass: %d, mode %s", resp.StatusCode, modes.For("local/roll/x"))
	}
	resp, _ = e.page("POST", "/console/modes", hdr, url.Values{"pattern": {"local/roll/*"}, "mode": {"shadow"}, "breakGlass": {"yes"}})
	if resp.StatusCode != http.StatusSeeOther || modes.For("local/roll/x") != gateway.Shadow {
		t.Fatalf("shadow with break-glass: %d, mode %s", resp.StatusCode, modes.For("local/roll/x"))
	}
}

// A console action's success is shown once, by the page it redirects to,
// from the session: a link carrying ?set= cannot make the console claim a
// mode change nobody made, and a reload does not show it again.
func TestConsoleSaysWhatItDidOnlyAfterItDidIt(t *testing.T) {
	e := newEnv(t)
	modes, _ := gateway.NewModes(gateway.ModeRule{Pattern: "local/roll/*", Mode: gateway.Enforce})
	e.srv.Admin = modesAdmin{modes: modes}
	cookie := e.login()
	hdr := map[string]string{"Cookie": cookie, "Sec-Fetch-Site": "same-origin"}
	if _, body := e.page("GET", "/console/modes?set=orders/*+shadow", hdr, nil); strings.Contains(body, `id="mode-set"`) {
		t.Fatal("a link's ?set= made the console claim a mode change")
	}
	resp, _ := e.page("POST", "/console/modes", hdr, url.Values{"pattern": {"local/new/*"}, "mode": {"enforce"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/modes" {
		t.Fatalf("set mode: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if _, body := e.page("GET", "/console/modes", hdr, nil); !strings.Contains(body, `id="mode-set">Set <code>local/new/* enforce</code>`) {
		t.Fatalf("the page after the change does not say it:\n%s", body)
	}
	if _, body := e.page("GET", "/console/modes", hdr, nil); strings.Contains(body, `id="mode-set"`) {
		t.Fatal("a reload said it again")
	}
}

// Rule: every mode change, through the admin API as through the console, is
// logged with who made it, the pattern, the mode and the break-glass flag; a
// refused one is not.
func TestEveryModeChangeIsLoggedWithWhatChanged(t *testing.T) {
	modes, _ := gateway.NewModes(gateway.ModeRule{Pattern: "local/roll/*", Mode: gateway.Enforce})
	e := newEnvWith(t, func(s *handlers.Server) { s.Admin = modesAdmin{modes: modes} })
	r := e.do("PUT", "/v1/admin/modes", "ops", nil, `{"pattern":"local/roll/*","mode":"shadow"}`)
	wantProblem(t, r, http.StatusForbidden, "FORBIDDEN")
	if strings.Contains(e.logs.String(), "mode changed") {
		t.Fatalf("a refused change was logged as made:\n%s", e.logs.String())
	}
	if r := e.do("PUT", "/v1/admin/modes", "ops", nil, `{"pattern":"local/new/*","mode":"enforce"}`); r.status != http.StatusOK {
		t.Fatalf("set mode: %d %s", r.status, r.body)
	}
	cookie := e.login()
	hdr := map[string]string{"Cookie": cookie, "Sec-Fetch-Site": "same-origin"}
	if resp, _ := e.page("POST", "/console/modes", hdr, url.Values{"pattern": {"local/roll/*"}, "mode": {"shadow"}, "breakGlass": {"yes"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("console set mode: %d", resp.StatusCode)
	}
	logs := e.logs.String()
	for _, want := range []string{
		`msg="mode changed" caller=admin:ops path=/v1/admin/modes pattern=local/new/* mode=enforce breakGlass=false`,
		`msg="mode changed" caller=admin:operator path=/console/modes pattern=local/roll/* mode=shadow breakGlass=true`,
	} {
		if !strings.Contains(logs, want) {
			t.Fatalf("no line %q in:\n%s", want, logs)
		}
	}
}
