package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRetentionIsOffByDefaultAndValidated(t *testing.T) {
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	if c.Retention.SettledReceipts != 0 {
		t.Fatalf("retention is on by default: %+v", c.Retention)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		r    Retention
		want string
	}{
		{Retention{SettledReceipts: -time.Hour, Interval: time.Minute, Batch: 10}, "must not be negative"},
		{Retention{SettledReceipts: time.Minute, Interval: time.Minute, Batch: 10}, "at least 1h"},
		{Retention{SettledReceipts: 24 * time.Hour, Interval: 0, Batch: 0}, "retention.interval"},
		{Retention{SettledReceipts: 24 * time.Hour, Interval: time.Minute, Batch: 0}, "retention.batch"},
	} {
		c.Retention = bad.r
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: got %v, want %q", bad.r, err, bad.want)
		}
	}
	c.Retention = Retention{SettledReceipts: 2 * time.Hour, Interval: time.Minute, Batch: 10}
	c.Reconcile.Deadline = 3 * time.Hour
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "must exceed reconcile.deadline") {
		t.Errorf("retention within the reconcile deadline accepted: %v", err)
	}
}

func TestRetentionFromAFileKeepsTheOtherDefaults(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("retention:\n  settledReceipts: 720h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	if err := Load(p, &c); err != nil {
		t.Fatal(err)
	}
	if c.Retention != (Retention{SettledReceipts: 720 * time.Hour, Interval: 10 * time.Minute, Batch: 1000}) {
		t.Fatalf("retention = %+v", c.Retention)
	}
}

// TestQuarantineRetentionIsOffByDefaultAndValidated: retention.quarantine
// is 0 (keep every record) unless set, at least MinRetention when set, and
// its problem is reported beside every other one of the config.
func TestQuarantineRetentionIsOffByDefaultAndValidated(t *testing.T) {
	c := Dev()
	c.Identities = []Identity{{Name: "w", Token: "t"}}
	if c.Retention.Quarantine != 0 {
		t.Fatalf("quarantine retention is on by default: %+v", c.Retention)
	}
	for _, bad := range []struct {
		r    Retention
		want string
	}{
		{Retention{Quarantine: -time.Hour, Interval: time.Minute, Batch: 10}, "retention.quarantine must not be negative"},
		{Retention{Quarantine: 59 * time.Minute, Interval: time.Minute, Batch: 10}, "retention.quarantine (59m0s) must be at least 1h"},
	} {
		c.Retention = bad.r
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: got %v, want %q", bad.r, err, bad.want)
		}
	}
	for _, ok := range []time.Duration{0, time.Hour, 720 * time.Hour} {
		c.Retention = Retention{Quarantine: ok, Interval: time.Minute, Batch: 10}
		if err := c.Validate(); err != nil {
			t.Errorf("retention.quarantine %s refused: %v", ok, err)
		}
	}
	// Every problem at once: the receipts' age, the quarantine's and the batch.
	c.Retention = Retention{SettledReceipts: time.Minute, Quarantine: time.Minute, Interval: time.Minute, Batch: 0}
	err := c.Validate()
	for _, want := range []string{"retention.settledReceipts (1m0s) must be at least 1h", "retention.quarantine (1m0s) must be at least 1h", "retention.batch"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("three retention problems: got %v, want %q among them", err, want)
		}
	}
}

func TestQuarantineRetentionFromAFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("retention:\n  quarantine: 168h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := Default()
	if err := Load(p, &c); err != nil {
		t.Fatal(err)
	}
	if c.Retention != (Retention{Quarantine: 168 * time.Hour, Interval: 10 * time.Minute, Batch: 1000}) {
		t.Fatalf("retention = %+v", c.Retention)
	}
}
