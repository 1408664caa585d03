package config

import "time"

// Retention configures the compaction of settled receipts and of
// quarantine records (README, "Retention"). Each is off unless its age
// (settledReceipts, quarantine) is set; both run in the same pass.
type Retention struct {
	// SettledReceipts is how long a settled (COMMITTED, FAILED, NOT_APPLIED)
	// receipt is kept after its settlement; 0, the default, keeps every
	// receipt. At least MinRetention when set. A replay of a segment whose
	// receipt was compacted is refused instead of answered with it.
	SettledReceipts time.Duration `yaml:"settledReceipts"`
	// Quarantine is how long a quarantine record is kept after its last
	// attempt (the last time its refused request came); 0, the default,
	// keeps every record. At least MinRetention when set. A deleted record
	// is gone from the quarantine list and GET by ID, and no longer keeps
	// the receipt it names from settledReceipts' compaction.
	Quarantine time.Duration `yaml:"quarantine"`
	// Interval is the time between compaction passes (default 10m).
	Interval time.Duration `yaml:"interval"`
	// Batch is the most receipts, or quarantine records, one delete removes
	// (default 1000).
	Batch int `yaml:"batch"`
}

// MinRetention is the shortest retention.settledReceipts, and
// retention.quarantine, accepted: every retry of a write whose answer was
// lost, and every reconciliation, happens well within it, and an operator
// paged for a QUARANTINED refusal has that long to look at its record.
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
	switch {
	case r.Quarantine < 0:
		at("retention.quarantine", "retention.quarantine must not be negative (0 keeps every quarantine record)")
	case r.Quarantine > 0 && r.Quarantine < MinRetention:
		at("retention.quarantine", "retention.quarantine (%s) must be at least %s", r.Quarantine, MinRetention)
	}
	if r.Interval <= 0 {
		at("retention.interval", "retention.interval must be positive")
	}
	if r.Batch <= 0 || r.Batch > 100_000 {
		at("retention.batch", "retention.batch must be between 1 and 100000")
	}
}
