package handlers_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/handlers"
)

// logLines decodes the JSON log lines of buf with the given message.
func logLines(t *testing.T, buf *bytes.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestStaleRetryLoopWritesBoundedRefusalLines: a superseded worker retrying
// its write 300 times gets 300 STALE_OWNER answers, all counted, but at most
// a burst of log lines; once the clock moves on, the next line reports how
// many were left out. Another caller's refusals have their own budget.
func TestStaleRetryLoopWritesBoundedRefusalLines(t *testing.T) {
	var (
		buf    bytes.Buffer
		mu     sync.Mutex
		counts = map[fencegate.Code]int{}
		now    = time.Unix(1_700_000_000, 0)
	)
	e := newEnvWith(t, func(s *handlers.Server) {
		s.Log = slog.New(slog.NewJSONHandler(&buf, nil))
		s.Now = func() time.Time { return now }
		s.Refused = func(c fencegate.Code) { mu.Lock(); counts[c]++; mu.Unlock() }
	})
	a := accepted(t, e)
	b := e.grant(res7, ownerB, 6, nil)
	if r := e.put(tokB, b, "local/inv/7", 1, "B"); r.status != http.StatusOK {
		t.Fatalf("B: %d %s", r.status, r.body)
	}
	const n = 300
	for range n {
		wantProblem(t, e.put(tokA, a, "local/inv/7", 2, "A late"), 409, "STALE_OWNER")
	}
	lines := logLines(t, &buf, "request refused")
	if len(lines) == 0 || len(lines) > 5 {
		t.Fatalf("%d refusals wrote %d log lines, want 1 to 5", n, len(lines))
	}
	if counts[fencegate.CodeStaleOwner] != n {
		t.Fatalf("counted %d STALE_OWNER answers, want %d", counts[fencegate.CodeStaleOwner], n)
	}
	for _, l := range lines {
		if l["caller"] != ownerA || l["code"] != "STALE_OWNER" {
			t.Fatalf("refusal line %v: want caller %s and the code", l, ownerA)
		}
	}

	// Another caller's refusal of the same code is logged.
	buf.Reset()
	old := e.grant(res7, ownerB, 4, nil)
	wantProblem(t, e.put(tokB, old, "local/inv/7", 1, "B stale"), 409, "STALE_OWNER")
	if got := logLines(t, &buf, "request refused"); len(got) != 1 {
		t.Fatalf("another caller's refusal wrote %d lines, want 1", len(got))
	}

	// Later, the stale worker's next refusal is logged with the count left out.
	buf.Reset()
	now = now.Add(time.Minute)
	wantProblem(t, e.put(tokA, a, "local/inv/7", 2, "A late"), 409, "STALE_OWNER")
	got := logLines(t, &buf, "request refused")
	if len(got) != 1 {
		t.Fatalf("after a minute, a refusal wrote %d lines, want 1", len(got))
	}
	if s, _ := got[0]["suppressed"].(float64); int(s) != n-len(lines) {
		t.Fatalf("line after the flood reports %v suppressed, want %d", got[0]["suppressed"], n-len(lines))
	}
	if counts[fencegate.CodeStaleOwner] != n+2 { // and B's
		t.Fatalf("counted %d STALE_OWNER answers, want %d", counts[fencegate.CodeStaleOwner], n+2)
	}
}
