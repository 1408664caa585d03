package config

import "time"

// Retention configures the compaction of settled receipts (README,
// "Retention"). It is off unless settledReceipts is set.
type Retention struct {
	// SettledReceipts is how long a settled (COMMITTED, FAILED, NOT_APPLIED)
	// receipt is kept after its settlement; 0, the default, keeps every
	// receipt. At least MinRetention when set. A replay of a segment whose
	// receipt was compacted is refused instead of answered with it.
	SettledReceipts time.Duration `yaml:"settledReceipts"`
	// Interval is the time between compaction passes (default 10m).
	Interval time.Duration `yaml:"interval"`
	// Batch is the most receipts one delete removes (default 1000).
	Batch int `yaml:"batch"`
}

// MinRetention is the shortest retention.settledReceipts accepted: every
// retry of a write whose answer was lost, and every reconciliation, happens
// well within it.
const MinRetention = time.Hour

func defaultRetention() Retention { return Retention{Interval: 10 * time.Minute, Batch: 1000} }

// check reports retention's problems through at.
func (r Retention) check(at func(field, format string, args ...any), reconcileDeadline time.Duration) {
	switch {
	case r.SettledReceipts < 0:
		at("retention.settledReceipts", "retention.settledReceipts must not be negative (0 keeps every receipt)")
	case r.SettledReceipts > 0 && r.SettledReceipts < MinRetention:
		at("retention.settledReceipts", "retention.settledReceipts (%s) must be at least %s", r.SettledReceipts, MinRetention)
	case r.SettledReceipts > 0 && r.SettledReceipts <= reconcileDeadline:
		at("retention.settledReceipts", "retention.settledReceipts (%s) must exceed reconcile.deadline (%s)", r.SettledReceipts, reconcileDeadline)
	}
	if r.Interval <= 0 {
		at("retention.interval", "retention.interval must be positive")
	}
	if r.Batch <= 0 || r.Batch > 100_000 {
		at("retention.batch", "retention.batch must be between 1 and 100000")
	}
}
