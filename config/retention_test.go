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
