package config

import (
	"net/url"
	"strings"
)

// Log is how the process logs (log/slog).
type Log struct {
	// Format is "text" (default) or "json".
	Format string `yaml:"format"`
	// Level is "debug", "info" (default), "warn" or "error".
	Level string `yaml:"level"`
}

// Tracing exports OpenTelemetry spans over OTLP/HTTP; off unless Endpoint is
// set.
type Tracing struct {
	// Endpoint is the collector's OTLP/HTTP base URL (http:// or https://,
	// e.g. http://otel-collector:4318); spans go to Endpoint/v1/traces.
	Endpoint string `yaml:"endpoint"`
	// SampleRatio is the share of new traces sampled, 0 < r <= 1 (default 1);
	// a caller's sampled traceparent is always followed.
	SampleRatio float64 `yaml:"sampleRatio"`
	// ServiceName names the process in traces (default "fencegate").
	ServiceName string `yaml:"serviceName"`
}

// Enabled reports whether spans are exported.
func (t Tracing) Enabled() bool { return t.Endpoint != "" }

// validateObservability reports problems of the log and tracing settings.
func (c *Config) validateObservability(at func(field, format string, args ...any)) {
	switch strings.ToLower(c.Log.Format) {
	case "", "text", "json":
	default:
		at("log.format", "log format %q: want text or json", c.Log.Format)
	}
	switch strings.ToLower(c.Log.Level) {
	case "", "debug", "info", "warn", "error":
	default:
		at("log.level", "log level %q: want debug, info, warn or error", c.Log.Level)
	}
	if t := c.Tracing; t.Endpoint != "" {
		if u, err := url.Parse(t.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			at("tracing.endpoint", "tracing endpoint %q: want an http:// or https:// URL of an OTLP/HTTP collector", Redacted(t.Endpoint))
		}
	}
	if r := c.Tracing.SampleRatio; r < 0 || r > 1 {
		at("tracing.sampleRatio", "tracing sampleRatio %v: want 0 < ratio <= 1 (0 means the default, 1)", r)
	}
}

// LogLevel is Log.Level or "info".
func (c *Config) LogLevel() string {
	if c.Log.Level == "" {
		return "info"
	}
	return strings.ToLower(c.Log.Level)
}
