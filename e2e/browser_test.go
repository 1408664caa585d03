package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is the headless browser the console tests drive: Debian's
// chromium (scripts/services.sh ensure_chromium), or FENCEGATE_CHROMIUM.
// Without one the tests skip, except under CI=true, where they fail.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FENCEGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no chromium on PATH (scripts/services.sh ensure_chromium installs it); the console's browser tests never skip under CI=true")
	}
	t.Skip("no chromium on PATH; install it (apt-get install chromium) or set FENCEGATE_CHROMIUM")
	return ""
}

// browser starts a headless chromium with a fresh profile, closed network
// habits (no QUIC, no background or component updates, no sync: on a
// machine without internet it would otherwise hang) and, as root, no
// sandbox. The returned context drives one tab and ends after timeout.
func browser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1400, 1000),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	// The first call starts the browser, which lives as long as bctx: no
	// timeout on it (chromedp.Run), only on what follows.
	if err := chromedp.Do(bctx); err != nil {
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, timeout)
	t.Cleanup(func() {
		cancel()
		cancelBrowser()
		cancelAlloc()
	})
	return ctx
}

// artifactsDir is where browser tests leave screenshots:
// $FENCEGATE_TEST_ARTIFACTS (default /tmp/fencegate-artifacts), under console/.
func artifactsDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("FENCEGATE_TEST_ARTIFACTS")
	if root == "" {
		root = filepath.Join(os.TempDir(), "fencegate-artifacts")
	}
	dir := filepath.Join(root, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot saves the whole page as DIR/NAME.png.
func screenshot(dir, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		png, err := chromedp.FullScreenshot(100)(ctx, t)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+".png"), png, 0o644)
	})
}

// text reads the text of the first element sel matches.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// do runs browser steps or fails the test, saving a screenshot of the page.
func do(t *testing.T, ctx context.Context, dir, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		_ = chromedp.Do(ctx, screenshot(dir, "failed-"+what))
		html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
		t.Fatalf("%s: %v\npage:\n%s", what, err, html)
	}
}
