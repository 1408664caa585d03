package logctx_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/logctx"
)

// TestEveryLineOfARequestNamesItOnce: lines logged with the request's
// context carry its ID and the facts added so far, a key added twice once
// with its latest value; lines without it carry none.
func TestEveryLineOfARequestNamesItOnce(t *testing.T) {
	var buf bytes.Buffer
	log, err := logctx.NewLogger(&buf, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	ctx := logctx.WithRequest(context.Background(), "req-1")
	logctx.Add(ctx, slog.String("caller", "a"), slog.Int("segment", 1))
	logctx.Add(ctx, slog.Int("segment", 2))
	log.InfoContext(ctx, "one")
	log.Info("two")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if !strings.Contains(lines[0], "requestId=req-1 caller=a segment=2") || strings.Count(lines[0], "segment=") != 1 {
		t.Fatalf("line 1: %s", lines[0])
	}
	if strings.Contains(lines[1], "requestId") {
		t.Fatalf("line 2: %s", lines[1])
	}
	if logctx.RequestID(ctx) != "req-1" || logctx.RequestID(context.Background()) != "" {
		t.Fatal("RequestID")
	}
}

// TestBadFormatOrLevelIsRefused names what is accepted.
func TestBadFormatOrLevelIsRefused(t *testing.T) {
	if _, err := logctx.NewLogger(&bytes.Buffer{}, "xml", "info"); err == nil {
		t.Fatal("format xml accepted")
	}
	if _, err := logctx.NewLogger(&bytes.Buffer{}, "json", "loud"); err == nil {
		t.Fatal("level loud accepted")
	}
}

// TestManyFactsKeepTheOrderTheyWereFirstAdded: a bag holding more facts
// than it keeps inline still names each key once, in the order it was first
// added, with its latest value.
func TestManyFactsKeepTheOrderTheyWereFirstAdded(t *testing.T) {
	var buf bytes.Buffer
	log, err := logctx.NewLogger(&buf, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	ctx := logctx.WithRequest(context.Background(), "req-2")
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		logctx.Add(ctx, slog.Int(k, 1))
	}
	logctx.Add(ctx, slog.Int("c", 3), slog.Int("k", 1), slog.Int("a", 2))
	log.InfoContext(ctx, "x")
	if !strings.Contains(buf.String(), "requestId=req-2 a=2 b=1 c=3 d=1 e=1 f=1 g=1 h=1 i=1 j=1 k=1") {
		t.Fatalf("line: %s", buf.String())
	}
}
