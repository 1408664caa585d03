package config

import (
	"strings"
	"testing"
)

// TestLogAndTracingSettingsAreValidatedTogether: a bad log format, log
// level, tracing endpoint and sample ratio are all reported at once, each
// under its field; the defaults (text, info, tracing off) are valid.
func TestLogAndTracingSettingsAreValidatedTogether(t *testing.T) {
	c := Dev()
	c.Identities = []Identity{{Name: "a", Token: "t"}}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if c.Tracing.Enabled() || c.LogLevel() != "info" {
		t.Fatalf("tracing on by default (%v) or level %q", c.Tracing.Enabled(), c.LogLevel())
	}
	c.Log = Log{Format: "xml", Level: "loud"}
	c.Tracing = Tracing{Endpoint: "collector:4318", SampleRatio: 2}
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, field := range []string{"log format", "log level", "tracing endpoint", "tracing sampleRatio"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("no problem reported for %s: %v", field, err)
		}
	}
	c.Log = Log{Format: "json", Level: "debug"}
	c.Tracing = Tracing{Endpoint: "http://otel-collector:4318", SampleRatio: 0.5}
	if err := c.Validate(); err != nil || !c.Tracing.Enabled() {
		t.Fatalf("valid settings refused: %v", err)
	}
}
