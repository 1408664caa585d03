package handlers_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// consoleSecret is an admin token the console tests log in with.
const consoleSecret = "console-secret-7f3a"

// page sends a console request with extra headers (and a form body for POST).
func (e *env) page(method, path string, hdr map[string]string, form url.Values) (*http.Response, string) {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req := httptest.NewRequest(method, "http://gw"+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, req)
	b, _ := io.ReadAll(w.Result().Body)
	return w.Result(), string(b)
}

var sameOrigin = map[string]string{"Sec-Fetch-Site": "same-origin"}

// login logs in to the console and returns the session cookie header.
func (e *env) login() string {
	e.t.Helper()
	resp, body := e.page("POST", "/console/login", sameOrigin, url.Values{"token": {consoleSecret}, "next": {"/console/unknown"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/unknown" {
		e.t.Fatalf("login: %d %s %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	for _, c := range resp.Cookies() {
		if c.Name == "fencegate_console" {
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/console" {
				e.t.Fatalf("session cookie %+v is not HttpOnly, SameSite=Strict, Path=/console", c)
			}
			if strings.Contains(c.Value, consoleSecret) {
				e.t.Fatal("the session cookie carries the admin token")
			}
			return c.Name + "=" + c.Value
		}
	}
	e.t.Fatal("login set no session cookie")
	return ""
}

func TestConsoleSendsBrowsersWithoutASessionToLoginAndRefusesWorkloadCredentials(t *testing.T) {
	e := newEnv(t)
	resp, _ := e.page("GET", "/console/unknown", nil, nil)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/console/login?next=") {
		t.Fatalf("no session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := e.page("GET", "/console/unknown", map[string]string{"Authorization": "Bearer " + tokA}, nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "UNAUTHENTICATED") {
		t.Fatalf("workload credential: %d %s", resp.StatusCode, body)
	}
	resp, _ = e.page("GET", "/console/unknown", map[string]string{"Authorization": "Bearer " + consoleSecret}, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin bearer: %d", resp.StatusCode)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("console page headers: %v", resp.Header)
	}
}

func TestConsoleLoginStartsASessionAndNeverRendersTheToken(t *testing.T) {
	e := newEnv(t)
	cookie := e.login()
	resp, body := e.page("GET", "/console/", map[string]string{"Cookie": cookie}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "admin:operator") {
		t.Fatalf("home with a session: %d %s", resp.StatusCode, body)
	}
	if strings.Contains(body, consoleSecret) {
		t.Fatal("a console page renders the admin token")
	}
	resp, body = e.page("POST", "/console/login", sameOrigin, url.Values{"token": {tokA}})
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 || strings.Contains(body, tokA) {
		t.Fatalf("login with a workload token: %d cookies %v", resp.StatusCode, resp.Cookies())
	}
	// Logging out ends the session.
	if resp, _ := e.page("POST", "/console/logout", map[string]string{"Cookie": cookie, "Sec-Fetch-Site": "same-origin"}, url.Values{}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if resp, _ := e.page("GET", "/console/", map[string]string{"Cookie": cookie}, nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the session outlived its logout: %d", resp.StatusCode)
	}
}

func TestConsoleRefusesCrossOriginPosts(t *testing.T) {
	e := newEnv(t)
	resp, _ := e.page("POST", "/console/login", map[string]string{"Sec-Fetch-Site": "cross-site"}, url.Values{"token": {consoleSecret}})
	if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Fatalf("cross-site login: %d %v", resp.StatusCode, resp.Cookies())
	}
	cookie := e.login()
	resp, _ = e.page("POST", "/console/logout", map[string]string{"Cookie": cookie, "Origin": "http://evil.example"}, url.Values{})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin logout: %d", resp.StatusCode)
	}
	if resp, _ := e.page("GET", "/console/", map[string]string{"Cookie": cookie}, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("the refused cross-origin logout ended the session: %d", resp.StatusCode)
	}
}

func TestConsoleTimelineShowsAStaleWriteRefusedBesideTheLandedSegment(t *testing.T) {
	e := newEnv(t)
	newer, older := e.grant(res7, ownerA, 2, nil), e.grant(res7, ownerA, 1, nil)
	if r := e.put(tokA, newer, "local/inv/7", 1, "new"); r.status != 200 {
		t.Fatalf("newer write: %d %s", r.status, r.body)
	}
	wantProblem(t, e.put(tokA, older, "local/inv/7", 1, "old"), 409, "STALE_OWNER")
	cookie := e.login()
	resp, body := e.page("GET", "/console/resource?name="+url.QueryEscape(res7), map[string]string{"Cookie": cookie}, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resource page: %d %s", resp.StatusCode, body)
	}
	for _, want := range []string{`data-state="COMMITTED"`, `data-code="STALE_OWNER"`, "REFUSED STALE_OWNER", `<td id="highest-fence">2</td>`} {
		if !strings.Contains(body, want) {
			t.Fatalf("resource page lacks %q:\n%s", want, body)
		}
	}
}

func TestConsoleQuarantineShowsBothPayloadsSideBySide(t *testing.T) {
	e := newEnv(t)
	c := e.grant(res7, ownerA, 1, nil)
	if r := e.put(tokA, c, "local/inv/7", 1, "accepted-bytes"); r.status != 200 {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	wantProblem(t, e.put(tokA, c, "local/inv/7", 1, "<script>refused-bytes</script>"), 409, "QUARANTINED")
	cookie := e.login()
	_, list := e.page("GET", "/console/quarantine", map[string]string{"Cookie": cookie}, nil)
	i := strings.Index(list, `href="/console/quarantine/q_`)
	if i < 0 {
		t.Fatalf("quarantine list has no record:\n%s", list)
	}
	href := list[i+len(`href="`):]
	href = href[:strings.IndexByte(href, '"')]
	resp, body := e.page("GET", href, map[string]string{"Cookie": cookie}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "accepted-bytes") || !strings.Contains(body, "&lt;script&gt;refused-bytes&lt;/script&gt;") {
		t.Fatalf("quarantine page %s: %d\n%s", href, resp.StatusCode, body)
	}
}

func TestConsolePagesRender(t *testing.T) {
	e := newEnv(t)
	c := e.grant(res7, ownerA, 1, nil)
	r := e.put(tokA, c, "local/inv/7", 1, "x")
	cookie := e.login()
	for _, p := range []string{"/console/", "/console/unknown", "/console/quarantine", "/console/shadow", "/console/modes",
		"/console/search?q=nothing-here", "/console/receipt?id=" + r.header.Get("Fence-Receipt"),
		"/console/operation?id=" + c.vg.OperationID, "/console/static/console.css"} {
		if resp, body := e.page("GET", p, map[string]string{"Cookie": cookie}, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, resp.StatusCode, body)
		}
	}
	if resp, _ := e.page("GET", "/console/search?q="+url.QueryEscape(res7), map[string]string{"Cookie": cookie}, nil); resp.Header.Get("Location") != "/console/resource?name="+url.QueryEscape(res7) {
		t.Errorf("search for a resource goes to %q", resp.Header.Get("Location"))
	}
}

func TestConsoleMoreLinkCarriesTheCursorAndOpensTheNextPage(t *testing.T) {
	e := newEnv(t)
	c := e.grant(res7, ownerA, 1, nil)
	first := e.put(tokA, c, "local/inv/7", 1, "one")
	second := e.put(tokA, c, "local/inv/7", 2, "two")
	if first.status != 200 || second.status != 200 {
		t.Fatalf("writes: %d %d", first.status, second.status)
	}
	cookie := e.login()
	_, body := e.page("GET", "/console/operation?limit=1&id="+url.QueryEscape(c.vg.OperationID), map[string]string{"Cookie": cookie}, nil)
	i := strings.Index(body, `href="/console/operation?`)
	if i < 0 {
		t.Fatalf("operation page of one receipt of two has no more link:\n%s", body)
	}
	href := body[i+len(`href="`):]
	href = strings.ReplaceAll(href[:strings.IndexByte(href, '"')], "&amp;", "&")
	u, err := url.Parse(href)
	if err != nil {
		t.Fatal(err)
	}
	if q := u.Query(); q.Get("id") != c.vg.OperationID || q.Get("cursor") == "" {
		t.Fatalf("more link %q does not carry the operation and a cursor", href)
	}
	resp, next := e.page("GET", href, map[string]string{"Cookie": cookie}, nil)
	ids := []string{first.header.Get("Fence-Receipt"), second.header.Get("Fence-Receipt")}
	shown := 0
	for _, id := range ids {
		if strings.Contains(body, id) {
			shown++
			if strings.Contains(next, id) {
				t.Errorf("receipt %s is on both pages", id)
			}
		}
	}
	if resp.StatusCode != http.StatusOK || shown != 1 || !(strings.Contains(next, ids[0]) || strings.Contains(next, ids[1])) {
		t.Fatalf("next page %s: %d, first page shows %d receipts\n%s", href, resp.StatusCode, shown, next)
	}
}

func TestConsoleResourceLinksOpenTheResourcePage(t *testing.T) {
	e := newEnv(t)
	c := e.grant(res7, ownerA, 1, nil)
	r := e.put(tokA, c, "local/inv/7", 1, "x")
	if r.status != 200 {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	cookie := e.login()
	_, body := e.page("GET", "/console/receipt?id="+r.header.Get("Fence-Receipt"), map[string]string{"Cookie": cookie}, nil)
	i := strings.Index(body, `href="/console/resource?`)
	if i < 0 {
		t.Fatalf("receipt page links no resource:\n%s", body)
	}
	href := body[i+len(`href="`):]
	href = strings.ReplaceAll(href[:strings.IndexByte(href, '"')], "&amp;", "&")
	u, err := url.Parse(href)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Query().Get("name"); got != res7 {
		t.Fatalf("resource link %q names %q, not %q", href, got, res7)
	}
	if resp, page := e.page("GET", href, map[string]string{"Cookie": cookie}, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("resource link %s: %d\n%s", href, resp.StatusCode, page)
	}
}

// A post-login destination stays inside the console: other origins,
// scheme-relative URLs and dot segments (plain or percent-encoded, which
// a browser or http.Redirect resolves out of /console/) go to /console/.
func TestLoginNextStaysInsideTheConsole(t *testing.T) {
	e := newEnv(t)
	for next, want := range map[string]string{
		"/console/resource?name=a/b":    "/console/resource?name=a/b",
		"/console/../v1/admin/state":    "/console/",
		"/console/%2e%2e/v1/admin/x":    "/console/",
		"/console/./unknown":            "/console/",
		"//evil.example/console/":       "/console/",
		"https://evil.example/console/": "/console/",
		"/v1/admin/state":               "/console/",
		"/console\\..\\v1":              "/console/",
	} {
		resp, body := e.page("POST", "/console/login", sameOrigin, url.Values{"token": {consoleSecret}, "next": {next}})
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
			t.Errorf("next %q: %d Location %q, want %q (%s)", next, resp.StatusCode, resp.Header.Get("Location"), want, body)
		}
	}
}

// TestConsoleReceiptNamesTheDelegateThatWroteIt: a delegated write's
// receipt page says which delegate made it under which delegation, and so
// do the operation's and the resource's lists beside the owner; the
// owner's own receipt page names no delegate.
func TestConsoleReceiptNamesTheDelegateThatWroteIt(t *testing.T) {
	e := newEnv(t)
	c := e.grant(res7, ownerA, 1, nil)
	own := e.put(tokA, c, "local/inv/7", 1, "x")
	if own.status != 200 {
		t.Fatalf("owner's write: %d %s", own.status, own.body)
	}
	const consumer, dlg = "spiffe://test/consumer-9", "dlg_console_1"
	if _, err := e.store.Admit(context.Background(), fencegate.AdmitRequest{Grant: c.vg, Segment: 2, Target: "objects/local/inv/7",
		Method: "PUT", PayloadDigest: "sha256:y", ReceiptID: "rcpt_delegated", Delegate: consumer, DelegationID: dlg, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	cookie := map[string]string{"Cookie": e.login()}
	for _, p := range []string{"/console/receipt?id=rcpt_delegated", "/console/operation?id=" + url.QueryEscape(c.vg.OperationID),
		"/console/resource?name=" + url.QueryEscape(res7)} {
		resp, body := e.page("GET", p, cookie, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "delegate "+consumer) {
			t.Fatalf("GET %s: %d, no delegate %s:\n%s", p, resp.StatusCode, consumer, body)
		}
		if strings.HasPrefix(p, "/console/receipt") && (!strings.Contains(body, `id="receipt-delegate"`) || !strings.Contains(body, dlg)) {
			t.Fatalf("receipt page does not name delegation %s:\n%s", dlg, body)
		}
	}
	if _, body := e.page("GET", "/console/receipt?id="+own.header.Get("Fence-Receipt"), cookie, nil); strings.Contains(body, `id="receipt-delegate"`) {
		t.Fatalf("the owner's receipt page names a delegate:\n%s", body)
	}
}

// TestQuarantineNamesTheDelegateThatSentIt: a delegated write's quarantine
// record names its delegate and delegation in the API's list and record
// and on the console's record page, its list and the resource's page, beside
// the owner; the owner's own refused write's record names no delegate.
func TestQuarantineNamesTheDelegateThatSentIt(t *testing.T) {
	e := newEnv(t)
	c := e.grant(res7, ownerA, 1, nil)
	if r := e.put(tokA, c, "local/inv/7", 1, "x"); r.status != 200 {
		t.Fatalf("owner's write: %d %s", r.status, r.body)
	}
	const consumer, dlg = "spiffe://test/consumer-9", "dlg_console_1"
	refused := fencegate.AdmitRequest{Grant: c.vg, Segment: 1, Target: "objects/local/inv/7", Method: "PUT",
		PayloadDigest: "sha256:y", ReceiptID: "rcpt_refused", Delegate: consumer, DelegationID: dlg, Now: time.Now()}
	if _, err := e.store.Admit(context.Background(), refused); fencegate.ErrorCode(err) != fencegate.CodeQuarantined {
		t.Fatalf("the delegate's rewrite of segment 1: %v, want QUARANTINED", err)
	}
	id := fencegate.QuarantineID(res7, c.vg.FenceToken, 1, refused.Target, "PUT", "", "sha256:y")
	wantProblem(t, e.put(tokA, c, "local/inv/7", 1, "z"), 409, "QUARANTINED")

	list := e.do("GET", "/v1/quarantine?resource="+url.QueryEscape(res7), tokA, nil, "")
	if !strings.Contains(list.body, `"delegate":"`+consumer+`","delegationId":"`+dlg+`"`) || strings.Count(list.body, `"delegate"`) != 1 {
		t.Fatalf("quarantine list: %d %s", list.status, list.body)
	}
	view := e.do("GET", "/v1/quarantine/"+id, tokA, nil, "")
	if q, _ := view.json["quarantine"].(map[string]any); q["delegate"] != consumer || q["delegationId"] != dlg || q["owner"] != ownerA {
		t.Fatalf("quarantine record %s: %d %s", id, view.status, view.body)
	}
	cookie := map[string]string{"Cookie": e.login()}
	for _, p := range []string{"/console/quarantine/" + id, "/console/quarantine", "/console/resource?name=" + url.QueryEscape(res7)} {
		resp, body := e.page("GET", p, cookie, nil)
		if resp.StatusCode != http.StatusOK || strings.Count(body, "delegate "+consumer) != 1 {
			t.Fatalf("GET %s: %d, not one delegate %s:\n%s", p, resp.StatusCode, consumer, body)
		}
		if strings.HasPrefix(p, "/console/quarantine/") && (!strings.Contains(body, `id="refused-delegate"`) || !strings.Contains(body, dlg)) {
			t.Fatalf("quarantine page does not name delegation %s:\n%s", dlg, body)
		}
	}
	all, err := e.store.Quarantined(context.Background(), res7, fencegate.Page{})
	if err != nil || len(all.Records) != 2 {
		t.Fatalf("quarantine of %s: %+v, %v", res7, all.Records, err)
	}
	own := all.Records[0].ID
	if own == id {
		own = all.Records[1].ID
	}
	if _, body := e.page("GET", "/console/quarantine/"+own, cookie, nil); !strings.Contains(body, "Refused") || strings.Contains(body, `id="refused-delegate"`) {
		t.Fatalf("the owner's refused write's page names a delegate:\n%s", body)
	}

	// A delegate's name is text on every page, never markup.
	marked := refused
	marked.Delegate, marked.DelegationID, marked.PayloadDigest, marked.ReceiptID = `spiffe://test/<b>x"`, `dlg_<i>`, "sha256:w", "rcpt_marked"
	if _, err := e.store.Admit(context.Background(), marked); fencegate.ErrorCode(err) != fencegate.CodeQuarantined {
		t.Fatalf("the marked delegate's rewrite of segment 1: %v, want QUARANTINED", err)
	}
	markedID := fencegate.QuarantineID(res7, c.vg.FenceToken, 1, marked.Target, "PUT", "", "sha256:w")
	for _, p := range []string{"/console/quarantine/" + markedID, "/console/quarantine", "/console/resource?name=" + url.QueryEscape(res7)} {
		resp, body := e.page("GET", p, cookie, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "&lt;b&gt;x") || strings.Contains(body, "<b>x") || strings.Contains(body, "<i>") {
			t.Fatalf("GET %s: %d, the delegate's name is not escaped:\n%s", p, resp.StatusCode, body)
		}
	}
}
