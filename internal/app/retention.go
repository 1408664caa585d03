package app

import (
	"context"
	"time"

	"github.com/fencegate/fencegate"
)

// compactLoop runs a retention pass every retention.interval until ctx ends
// (README, "Retention"). It does nothing when retention.settledReceipts is 0.
func (a *App) compactLoop(ctx context.Context) {
	c, ok := a.reconciler.Store.(fencegate.Compactor)
	if a.cfg.Retention.SettledReceipts <= 0 || !ok {
		return
	}
	t := time.NewTicker(a.cfg.Retention.Interval)
	defer t.Stop()
	for {
		if _, err := a.compactOnce(ctx, c, time.Now()); err != nil && ctx.Err() == nil {
			a.log.Warn("receipt compaction failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// compactOnce deletes, retention.batch at a time, every receipt settled more
// than retention.settledReceipts before now that the store may delete.
func (a *App) compactOnce(ctx context.Context, c fencegate.Compactor, now time.Time) (int, error) {
	r := a.cfg.Retention
	before := now.Add(-r.SettledReceipts)
	total := 0
	for ctx.Err() == nil {
		n, err := c.CompactReceipts(ctx, before, r.Batch)
		total += n
		if err != nil {
			return total, err
		}
		if n < r.Batch {
			break
		}
	}
	if total > 0 {
		a.log.Info("settled receipts compacted", "count", total, "settledBefore", before)
	}
	return total, nil
}
