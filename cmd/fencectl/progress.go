package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressMin is the size from which an upload shows a progress bar on its
// own (when stderr is a terminal): a few MiB, below which a bar would only
// flash.
const progressMin = 4 << 20

// stderrIsTerminal tells whether stderr is a terminal; tests replace it.
var stderrIsTerminal = func() bool { return term.IsTerminal(int(os.Stderr.Fd())) }

// progressMode is the --progress flag: auto (a bar for uploads of at least
// progressMin bytes when stderr is a terminal and --json is off), always, or
// never.
type progressMode string

func (m *progressMode) String() string { return string(*m) }

func (m *progressMode) Set(s string) error {
	switch s {
	case "auto", "always", "never":
		*m = progressMode(s)
		return nil
	}
	return fmt.Errorf("auto, always or never, not %q", s)
}

// withProgress returns body read through a progress bar on c.errOut (size
// bytes, -1 if unknown) when mode asks for one, and the function that ends
// the bar (complete if the upload was accepted, left where it stopped
// otherwise); without a bar, body itself. The bar is github.com/schollz/progressbar
// (bytes, rate, time left), redrawn at most every 100 ms.
func withProgress(c *cmd, mode progressMode, what string, body io.Reader, size int64) (io.Reader, func(ok bool)) {
	show := mode == "always" ||
		mode == "auto" && size >= progressMin && !c.g.json && stderrIsTerminal()
	if !show {
		return body, func(bool) {}
	}
	bar := progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(c.errOut),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionOnCompletion(func() { fmt.Fprintln(c.errOut) }),
	)
	r := progressbar.NewReader(body, bar)
	return &r, func(ok bool) {
		if ok {
			_ = bar.Finish()
			return
		}
		_ = bar.Exit()
		fmt.Fprintln(c.errOut)
	}
}
