package app

import (
	"context"
	"time"

	"github.com/fencegate/fencegate"
)

// compactLoop runs a retention pass every retention.interval until ctx ends
// (README, "Retention"). It does nothing when neither
// retention.settledReceipts nor retention.quarantine is set.
func (a *App) compactLoop(ctx context.Context) {
	c, ok := a.reconciler.Store.(fencegate.Compactor)
	r := a.cfg.Retention
	if (r.SettledReceipts <= 0 && r.Quarantine <= 0) || !ok {
		return
	}
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		a.retentionPass(ctx, c, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// retentionPass is one pass: the quarantine records first, so that the
// receipts the deleted ones named are compactable by the receipt pass that
// follows, then the receipts; each only when its age is set. A failure of
// one is logged and does not keep the other from running.
func (a *App) retentionPass(ctx context.Context, c fencegate.Compactor, now time.Time) {
	r := a.cfg.Retention
	if r.Quarantine > 0 {
		if _, err := a.compactQuarantineOnce(ctx, c, now); err != nil && ctx.Err() == nil {
			a.log.Warn("quarantine compaction failed", "err", err)
		}
	}
	if r.SettledReceipts > 0 {
		if _, err := a.compactOnce(ctx, c, now); err != nil && ctx.Err() == nil {
			a.log.Warn("receipt compaction failed", "err", err)
		}
	}
}

// compactOnce deletes, retention.batch at a time, every receipt settled more
// than retention.settledReceipts before now that the store may delete.
func (a *App) compactOnce(ctx context.Context, c fencegate.Compactor, now time.Time) (int, error) {
	before := now.Add(-a.cfg.Retention.SettledReceipts)
	total, err := a.inBatches(ctx, c.CompactReceipts, before)
	if total > 0 {
		a.log.Info("settled receipts compacted", "count", total, "settledBefore", before)
	}
	return total, err
}

// compactQuarantineOnce deletes, retention.batch at a time, every
// quarantine record last attempted more than retention.quarantine before
// now.
func (a *App) compactQuarantineOnce(ctx context.Context, c fencegate.Compactor, now time.Time) (int, error) {
	before := now.Add(-a.cfg.Retention.Quarantine)
	total, err := a.inBatches(ctx, c.CompactQuarantine, before)
	if total > 0 {
		a.log.Info("quarantine records compacted", "count", total, "lastAttemptBefore", before)
	}
	return total, err
}

// inBatches calls del with retention.batch until it deletes fewer (nothing
// more to delete now), fails or ctx ends, and returns the total deleted.
func (a *App) inBatches(ctx context.Context, del func(context.Context, time.Time, int) (int, error), before time.Time) (int, error) {
	batch := a.cfg.Retention.Batch
	total := 0
	for ctx.Err() == nil {
		n, err := del(ctx, before, batch)
		total += n
		if err != nil {
			return total, err
		}
		if n < batch {
			break
		}
	}
	return total, nil
}
