package app

import (
	"context"
	"os"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proofs"
)

// background runs the periodic work of a serving gateway until ctx ends:
// reconciliation passes (raising overdue UNKNOWN receipts on the
// fencegate_unknown_overdue gauge and in the log), and, for a gateway without
// an in-process registry, reloading the trust bundle file when it changes.
func (a *App) background(ctx context.Context) {
	t := time.NewTicker(a.cfg.Reconcile.Interval)
	defer t.Stop()
	var bundleMod time.Time
	if fi, err := os.Stat(a.admin.bundlePath); err == nil {
		bundleMod = fi.ModTime()
	}
	for {
		if _, err := a.reconciler.RunOnce(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("reconcile pass failed", "err", err)
		}
		if a.Registry == nil {
			bundleMod = a.reloadBundle(bundleMod)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reloadBundle installs the trust bundle file if it changed since mod; a
// bundle that does not parse or whose version is lower is refused and logged.
func (a *App) reloadBundle(mod time.Time) time.Time {
	fi, err := os.Stat(a.admin.bundlePath)
	if err != nil || !fi.ModTime().After(mod) {
		return mod
	}
	b, err := proofs.LoadBundle(a.admin.bundlePath)
	if err == nil {
		err = a.admin.verifier.SetBundle(b)
	}
	if err != nil {
		a.log.Error("trust bundle file refused", "path", a.admin.bundlePath, "err", err)
		return fi.ModTime()
	}
	a.log.Info("trust bundle reloaded", "path", a.admin.bundlePath, "version", b.Version())
	return fi.ModTime()
}

// raiseOverdue alarms on UNKNOWN receipts past the reconcile deadline: the
// fencegate_unknown_overdue gauge and an error log line each.
func (a *App) raiseOverdue(overdue []fencegate.Receipt) {
	a.metrics.overdue.Set(float64(len(overdue)))
	for _, r := range overdue {
		a.log.Error("UNKNOWN receipt needs manual reconciliation", "receipt", r.ID, "target", r.Target, "age", time.Since(r.CreatedAt).Round(time.Second))
	}
}
