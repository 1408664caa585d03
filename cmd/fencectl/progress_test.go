package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUploadProgressBarShowsWhenAskedOrLargeOnATerminal: a bar on stderr
// for an upload of 4 MiB or more when stderr is a terminal, or with
// --progress always; none for a small upload, a non-terminal stderr,
// --json, or --progress never. The bytes reach the gateway intact either
// way.
func TestUploadProgressBarShowsWhenAskedOrLargeOnATerminal(t *testing.T) {
	h := newHarness(t)
	big, small := filepath.Join(h.dir, "big"), filepath.Join(h.dir, "small")
	payload := bytes.Repeat([]byte("0123456789abcdef"), (5<<20)/16) // 5 MiB
	if err := os.WriteFile(big, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(small, []byte("small"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, e := h.run("acquire", "bucket/jobs", "--ttl", "10s", "--operation", "op-1"); code != 0 {
		t.Fatalf("acquire: %s", e)
	}
	t.Cleanup(func() { stderrIsTerminal = func() bool { return false } })
	cases := []struct {
		name     string
		terminal bool
		args     []string
		sent     string
		bar      bool
	}{
		{"LargeOnATerminal", true, []string{"put", "bucket/jobs/a", big}, string(payload), true},
		{"SmallOnATerminal", true, []string{"put", "bucket/jobs/a", small}, "small", false},
		{"LargeNotATerminal", false, []string{"put", "bucket/jobs/a", big}, string(payload), false},
		{"LargeWithJSON", true, []string{"--json", "put", "bucket/jobs/a", big}, string(payload), false},
		{"NeverOnATerminal", true, []string{"put", "bucket/jobs/a", big, "--progress", "never"}, string(payload), false},
		{"AlwaysSmallNotATerminal", false, []string{"put", "bucket/jobs/a", small, "--progress", "always"}, "small", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stderrIsTerminal = func() bool { return c.terminal }
			code, _, errOut := h.run(c.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if got := strings.Contains(errOut, "100%"); got != c.bar {
				t.Fatalf("bar shown %v, want %v: %q", got, c.bar, errOut)
			}
			if c.bar && !strings.Contains(errOut, "put bucket/jobs/a") {
				t.Fatalf("the bar does not name the upload: %q", errOut)
			}
			h.fake.mu.Lock()
			got := h.fake.bodies[len(h.fake.bodies)-1]
			h.fake.mu.Unlock()
			if got != c.sent {
				t.Fatalf("the gateway got %d bytes, want %d", len(got), len(c.sent))
			}
		})
	}
	before := h.snapshotLease(t)
	if code, _, _ := h.run("put", "bucket/jobs/a", small, "--progress", "sometimes"); code != exitUsage {
		t.Fatalf("--progress sometimes: exit %d, want %d", code, exitUsage)
	}
	h.leaseUnchanged(t, before, "put --progress sometimes")
}
