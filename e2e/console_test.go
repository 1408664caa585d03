package e2e

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// consoleToken is the admin token the browser logs in with.
const consoleToken = "ops-console-token"

// TestConsoleInHeadlessChromium drives the operator console of the built
// binary in headless chromium: an operator logs in, sees a stale write
// refused on the resource's fence timeline, a quarantined payload beside the
// accepted one, and resolves an overdue UNKNOWN from the page through its
// confirmation step. Screenshots of each page are left in
// $FENCEGATE_TEST_ARTIFACTS/console.
func TestConsoleInHeadlessChromium(t *testing.T) {
	ctx := browser(t, 90*time.Second)
	shots := artifactsDir(t)

	// An S3 store whose requests for s3a/held never reach S3 in time: the
	// gateway gives up after effectTimeout, the receipt is UNKNOWN, and the
	// reconciler's HEAD waits too.
	b := newS3Bucket(t)
	release := make(chan struct{})
	proxy, _ := holdingProxyFor(t, b.srv.Endpoint, func(r *http.Request) bool { return strings.Contains(r.URL.Path, "/held") }, release)
	t.Cleanup(func() { close(release) }) // before the proxy closes (cleanups run last first)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "gw.yaml")
	// deadline 1s: the UNKNOWN is overdue at once; the reconciler cannot
	// settle it by itself (its HEAD is held too); orphan 2s: an operator's
	// NOT_APPLIED is taken once the write cannot land, its expiry (1s), the
	// store's slack (1s) and the orphan grace after it was admitted.
	if err := os.WriteFile(cfg, []byte("effectTimeout: 1s\nreconcile: {interval: 200ms, deadline: 1s, orphan: 2s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startGatewayEnv(t, b.env(), "dev", "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
		"--identity", "worker-a=token-a", "--identity", "worker-b=token-b", "--admin-token", consoleToken,
		"--store", "s3a="+b.storeURL(proxy.URL))

	// A stale write: worker-a releases, worker-b takes fence 2 and writes;
	// worker-a's late segment under fence 1 is refused.
	a := p.acquire(t, "token-a", "local/tl", "a-1", "tl-op", 30000)
	if r := p.put(t, "token-a", a, "local/tl", 1, "a1"); r.status != http.StatusOK {
		t.Fatalf("a segment 1: %d %s", r.status, r.body)
	}
	if r := p.do(t, "DELETE", "/v1/leases/"+a.id, "token-a", nil, ""); r.status != http.StatusOK {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	bl := p.acquire(t, "token-b", "local/tl", "b-1", "tl-op", 30000)
	if r := p.put(t, "token-b", bl, "local/tl", 1, "b1"); r.status != http.StatusOK {
		t.Fatalf("b segment 1: %d %s", r.status, r.body)
	}
	wantCode(t, p.put(t, "token-a", a, "local/tl", 2, "a2 late"), http.StatusConflict, "STALE_OWNER")

	// A quarantined segment: segment 1 again with another payload.
	q := p.acquire(t, "token-a", "local/qa", "q-1", "qa-op", 30000)
	if r := p.put(t, "token-a", q, "local/qa", 1, "accepted payload v1"); r.status != http.StatusOK {
		t.Fatalf("qa segment 1: %d %s", r.status, r.body)
	}
	wantCode(t, p.put(t, "token-a", q, "local/qa", 1, "a different payload v2"), http.StatusConflict, "QUARANTINED")

	// An UNKNOWN outcome.
	h := p.acquire(t, "token-a", "s3a/held", "h-1", "held-op", 30000)
	lostAt := time.Now()
	lost := p.put(t, "token-a", h, "s3a/held", 1, "held")
	wantCode(t, lost, http.StatusBadGateway, "MUTATION_UNKNOWN")
	unknownID := lost.str("receiptId")

	// Log in.
	do(t, ctx, shots, "login",
		chromedp.Navigate(p.base+"/console/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		screenshot(shots, "login"),
		chromedp.SendKeys(chromedp.CSS("#token"), consoleToken),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#unknown-count")),
		screenshot(shots, "home"),
	)
	if page, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html"))); strings.Contains(page, consoleToken) {
		t.Fatal("a console page renders the admin token")
	}

	// The stale write on the timeline, refused, beside the fences that landed.
	do(t, ctx, shots, "timeline",
		chromedp.Navigate(p.base+"/console/resource?name="+url.QueryEscape("local/tl")),
		chromedp.WaitVisible(chromedp.CSS(`#timeline tr.refused[data-code="STALE_OWNER"]`)),
		screenshot(shots, "timeline"),
	)
	if got := text(t, ctx, `#timeline tr.refused[data-code="STALE_OWNER"]`); !strings.Contains(got, "REFUSED STALE_OWNER") || !strings.Contains(got, "worker-a") {
		t.Fatalf("refused row reads %q", got)
	}
	if got := text(t, ctx, "#fences"); !strings.Contains(got, "worker-a") || !strings.Contains(got, "worker-b") {
		t.Fatalf("fences table reads %q, want both holders", got)
	}
	if got := text(t, ctx, "#highest-fence"); got != "2" {
		t.Fatalf("highest fence shows %q", got)
	}

	// The quarantined payload next to the accepted one.
	do(t, ctx, shots, "quarantine",
		chromedp.Navigate(p.base+"/console/quarantine"),
		chromedp.WaitVisible(chromedp.CSS("#quarantine a.open")),
		chromedp.Click(chromedp.CSS("#quarantine a.open")),
		chromedp.WaitVisible(chromedp.CSS("#refused pre.payload")),
		screenshot(shots, "quarantine"),
	)
	if acc, ref := text(t, ctx, "#accepted pre.payload"), text(t, ctx, "#refused pre.payload"); acc != "accepted payload v1" || ref != "a different payload v2" {
		t.Fatalf("side by side: accepted %q, refused %q", acc, ref)
	}

	// The UNKNOWN, overdue, resolved from the page after confirming.
	row := `#unknown tr[data-receipt="` + unknownID + `"]`
	do(t, ctx, shots, "unknown",
		chromedp.Navigate(p.base+"/console/unknown"),
		chromedp.WaitVisible(chromedp.CSS(row)),
	)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(text(t, ctx, row), "overdue"); {
		if time.Now().After(deadline) {
			t.Fatalf("receipt %s not overdue after 20s: %q", unknownID, text(t, ctx, row))
		}
		time.Sleep(300 * time.Millisecond)
		do(t, ctx, shots, "unknown-reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(row)))
	}
	do(t, ctx, shots, "resolve",
		screenshot(shots, "unknown"),
		chromedp.Click(chromedp.CSS(row+" a.open")),
		chromedp.WaitVisible(chromedp.CSS("form.resolve")),
		chromedp.Click(chromedp.CSS(`form.resolve input[value="NOT_APPLIED"]`)),
		chromedp.SendKeys(chromedp.CSS(`form.resolve input[name="note"]`), "PUT never reached the bucket"),
		chromedp.Click(chromedp.CSS("form.resolve .resolve-start")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-resolve")),
		screenshot(shots, "resolve-confirm"),
	)
	if st := p.do(t, "GET", "/v1/receipts/"+unknownID, "token-a", nil, "").str("state"); st != "UNKNOWN" {
		t.Fatalf("receipt is %s before the confirmation", st)
	}
	// NOT_APPLIED is taken once the write can no longer land.
	time.Sleep(time.Until(lostAt.Add(5 * time.Second)))
	do(t, ctx, shots, "resolve-confirmed",
		chromedp.Click(chromedp.CSS("#confirm-resolve")),
		chromedp.WaitVisible(chromedp.CSS("#resolved")),
		screenshot(shots, "resolved"),
	)
	if got := text(t, ctx, "#receipt-state"); got != "NOT_APPLIED" {
		t.Fatalf("receipt page shows %q", got)
	}
	rc := p.do(t, "GET", "/v1/receipts/"+unknownID, "token-a", nil, "")
	if rc.str("state") != "NOT_APPLIED" || !strings.Contains(rc.str("error"), "PUT never reached the bucket") {
		t.Fatalf("receipt after resolving from the page: %s", rc.body)
	}
	if !strings.Contains(p.logs.String(), "audit: operator resolved an UNKNOWN receipt") {
		t.Fatal("no audit line in the gateway's log")
	}

	// Modes: enforce -> shadow is refused without break-glass, then set
	// with it; a refused write there is forwarded and shows as a verdict.
	setShadow := func(breakGlass bool) []chromedp.Action[chromedp.Void] {
		steps := []chromedp.Action[chromedp.Void]{
			chromedp.Navigate(p.base + "/console/modes"),
			chromedp.WaitVisible(chromedp.CSS("#mode-pattern")),
			chromedp.SendKeys(chromedp.CSS("#mode-pattern"), "local/roll/*"),
			chromedp.Click(chromedp.CSS(`form.setmode input[value="shadow"]`)),
		}
		if breakGlass {
			steps = append(steps, chromedp.Click(chromedp.CSS(`form.setmode input[name="breakGlass"]`)))
		}
		return append(steps, chromedp.Click(chromedp.CSS("form.setmode button")))
	}
	do(t, ctx, shots, "mode-without-break-glass", append(setShadow(false), chromedp.WaitVisible(chromedp.CSS("#error-code")))...)
	if got := text(t, ctx, "#error-code"); got != "FORBIDDEN" {
		t.Fatalf("shadow without break-glass answered %q", got)
	}
	do(t, ctx, shots, "mode-with-break-glass", append(setShadow(true), chromedp.WaitVisible(chromedp.CSS("#mode-set")), screenshot(shots, "modes"))...)
	r := p.acquire(t, "token-a", "local/roll/x", "r-1", "roll-op", 30000)
	if w := p.put(t, "token-a", r, "local/roll/x", 3, "out of order"); w.status != http.StatusOK || w.header.Get("Fence-Verdict") != "SEGMENT_OUT_OF_ORDER" {
		t.Fatalf("shadow write: %d %s %v", w.status, w.body, w.header)
	}
	do(t, ctx, shots, "shadow",
		chromedp.Navigate(p.base+"/console/shadow"),
		chromedp.WaitVisible(chromedp.CSS("section.shadow-group")),
		screenshot(shots, "shadow"),
	)
	if got := text(t, ctx, "section.shadow-group"); !strings.Contains(got, "local/roll/*") || !strings.Contains(got, "SEGMENT_OUT_OF_ORDER") {
		t.Fatalf("shadow verdicts read %q", got)
	}

	// Trust: the bundle's version and keys with their epochs.
	do(t, ctx, shots, "trust",
		chromedp.Navigate(p.base+"/console/trust"),
		chromedp.WaitVisible(chromedp.CSS("#keys tbody tr")),
		screenshot(shots, "trust"),
	)
	if got := text(t, ctx, "#bundle-version"); got == "" || got == "0" {
		t.Fatalf("trust bundle version shows %q", got)
	}
}
