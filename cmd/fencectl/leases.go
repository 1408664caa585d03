package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

func init() {
	register("acquire", verb{usage: "acquire RESOURCE --operation ID [--ttl 30s] [--request-id R]", nargs: 1,
		help: "take a lease; writes grant and status proof to the lease file", flags: acquireFlags})
	register("renew", verb{usage: "renew [--ttl D]", help: "extend the lease in the lease file", flags: renewFlags})
	register("release", verb{usage: "release", help: "give up the lease in the lease file", flags: releaseFlags})
	register("status", verb{usage: "status", help: "show the lease's state and refresh its status proof", flags: statusFlags})
}

func acquireFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	ttl := new(time.Duration)
	durationVar(fs, ttl, "ttl", 30*time.Second, minTTL, "lease time to live, a `duration` of at least 1ms")
	op := fs.String("operation", "", "stable business operation ID (required)")
	reqID := fs.String("request-id", "", "idempotency key; repeat it to recover a lost answer (default: generated)")
	root := fs.String("root", "", "operation root (default: derived by the registry)")
	category := fs.String("category", "", "operation category")
	return func(ctx context.Context, c *cmd) error {
		if *op == "" {
			return usageError{"--operation is required"}
		}
		l, err := c.client.AcquireLease(ctx, client.LeaseParams{AcquireParams: client.AcquireParams{
			Resource: c.args[0], RequestID: *reqID, TTL: *ttl, OperationID: *op,
			OperationRoot: *root, OperationCategory: *category,
		}})
		if err != nil {
			if l != nil && client.IsUncertain(err) {
				return &client.UncertainError{Op: "acquire (repeat with --request-id " + l.RequestID() + ")", Err: err}
			}
			return err
		}
		lf := &leaseFile{Gateway: c.g.gateway, TTLMs: ttl.Milliseconds(), NextSegment: 1, Lease: l.Info()}
		lock, err := lockLease(c.g.leaseFile)
		if err == nil {
			keepNumbering(lf, c.g.leaseFile)
			err = lf.save(c.g.leaseFile)
			lock.Close()
		}
		if err != nil {
			if serr := showLease(c, lf); serr != nil {
				return serr
			}
			return notRecorded{fmt.Sprintf("lease %s was acquired, but the lease file %s could not be written (%v): release it ('fencectl release' needs the file) or let its TTL end",
				lf.Lease.Lease, c.g.leaseFile, err), err}
		}
		return showLease(c, lf)
	}
}

// keepNumbering carries the next segment and the write in doubt of the
// lease file at path (read under its lock) over to lf, if it names the same
// lease: acquire repeated with the same request ID answers the same lease,
// whose segments up to the file's next one are taken (or in doubt).
func keepNumbering(lf *leaseFile, path string) {
	old, err := readLease(path)
	if err != nil || old.Lease.Lease != lf.Lease.Lease {
		return
	}
	lf.NextSegment = max(lf.NextSegment, old.NextSegment)
	lf.Doubt = old.Doubt
}

func renewFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	ttl := new(time.Duration)
	durationVar(fs, ttl, "ttl", 0, minTTL, "new time to live, a `duration` of at least 1ms (default: the acquisition's)")
	return leaseVerb(func(ctx context.Context, c *cmd, lf *leaseFile) (client.LeaseInfo, error) {
		d := time.Duration(lf.TTLMs) * time.Millisecond
		if *ttl > 0 {
			d = *ttl
		}
		return c.client.Renew(ctx, lf.Lease.Lease, d)
	})
}

func releaseFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	return leaseVerb(func(ctx context.Context, c *cmd, lf *leaseFile) (client.LeaseInfo, error) {
		return c.client.Release(ctx, lf.Lease.Lease)
	})
}

func statusFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	return leaseVerb(func(ctx context.Context, c *cmd, lf *leaseFile) (client.LeaseInfo, error) {
		return c.client.LeaseStatus(ctx, lf.Lease.Lease)
	})
}

// leaseVerb runs call on the lease in the lease file, keeps its answer there
// and shows the lease. The call is made without the lease file's lock, so
// that a renewal is not held up by a write uploading under it; its answer
// is merged under the lock into the file as it is then (its next segment
// kept), if the file still names the same lease.
func leaseVerb(call func(context.Context, *cmd, *leaseFile) (client.LeaseInfo, error)) func(context.Context, *cmd) error {
	return func(ctx context.Context, c *cmd) error {
		snap, err := readLease(c.g.leaseFile)
		if err != nil {
			return err
		}
		info, err := call(ctx, c, snap)
		if err != nil {
			return err
		}
		lf, err := loadLease(c.g.leaseFile)
		if err != nil {
			return err
		}
		defer lf.close()
		if lf.Lease.Lease != snap.Lease.Lease {
			snap.update(info)
			if err := showLease(c, snap); err != nil {
				return err
			}
			return localError{fmt.Sprintf("the lease file now names lease %s, not %s: its answer was not kept", lf.Lease.Lease, snap.Lease.Lease), nil}
		}
		if lf.newer(info) {
			lf.update(info)
			if err := lf.save(c.g.leaseFile); err != nil {
				return err
			}
		}
		return showLease(c, lf)
	}
}

// updateLease stores call's answer about lf in the lease file.
func updateLease(ctx context.Context, c *cmd, lf *leaseFile, call func(context.Context, *cmd, *leaseFile) (client.LeaseInfo, error)) error {
	info, err := call(ctx, c, lf)
	if err != nil {
		return err
	}
	lf.update(info)
	return lf.save(c.g.leaseFile)
}

// refreshStatus replaces lf's status proof (and re-issued grant) with a fresh one.
func refreshStatus(ctx context.Context, c *cmd, lf *leaseFile) error {
	return updateLease(ctx, c, lf, func(ctx context.Context, c *cmd, lf *leaseFile) (client.LeaseInfo, error) {
		return c.client.LeaseStatus(ctx, lf.Lease.Lease)
	})
}

// fenceFor returns the fence headers for w with segment seg (0: the lease
// file's next segment), refreshing a stale status proof first and settling
// a write in doubt (settleDoubt). The lease file stays locked until the
// caller closes it (after committed, or sent).
func fenceFor(ctx context.Context, c *cmd, seg uint64, w fencedWrite) (*leaseFile, client.Fence, error) {
	lf, err := loadLease(c.g.leaseFile)
	if err != nil {
		return nil, client.Fence{}, err
	}
	if !lf.proofFresh(time.Now()) {
		if err := refreshStatus(ctx, c, lf); err != nil {
			lf.close()
			return nil, client.Fence{}, err
		}
	}
	if lf.Lease.State != fencegate.StateHeld {
		lf.close()
		return nil, client.Fence{}, fencegate.Errorf(fencegate.CodeLeaseNotHeld, "lease %s is %s", lf.Lease.Lease, lf.Lease.State)
	}
	seg, err = settleDoubt(ctx, c, lf, seg, w)
	if err != nil {
		lf.close()
		return nil, client.Fence{}, err
	}
	if seg == 0 {
		seg = max(lf.NextSegment, 1)
	}
	return lf, client.Fence{Grant: lf.Lease.Grant, Status: lf.Lease.StatusProof, Segment: seg}, nil
}

// committed records that seg was accepted, so the next write takes seg+1
// (and seg, if it was in doubt, is settled); a lease file it cannot write is
// notRecorded (the write took effect).
func committed(c *cmd, lf *leaseFile, seg uint64, receiptID string) error {
	if client.IsShadowReceipt(receiptID) {
		return nil // shadow mode forwarded a write it refused: seg is still the next
	}
	if seg >= lf.NextSegment {
		lf.NextSegment = seg + 1
	}
	if lf.Doubt != nil && lf.Doubt.Segment == seg {
		lf.Doubt = nil
	}
	if err := lf.save(c.g.leaseFile); err != nil {
		return notRecorded{fmt.Sprintf("segment %d was accepted, but the lease file %s still names segment %d (%v): give the next write --segment %d",
			seg, c.g.leaseFile, seg, err, seg+1), err}
	}
	return nil
}

func showLease(c *cmd, lf *leaseFile) error {
	if c.g.json {
		return emit(c.out, lf.Lease)
	}
	l := lf.Lease
	status := ""
	if l.StatusExpiresAt != nil {
		status = "until " + l.StatusExpiresAt.Format(time.RFC3339)
	}
	table(c.out,
		[2]string{"lease", l.Lease}, [2]string{"resource", l.Resource}, [2]string{"fence", strconv.FormatUint(l.FenceToken, 10)},
		[2]string{"state", string(l.State)}, [2]string{"expires", l.ExpiresAt.Format(time.RFC3339)},
		[2]string{"status proof", status}, [2]string{"operation", l.OperationID}, [2]string{"request id", l.RequestID},
		[2]string{"next segment", strconv.FormatUint(lf.NextSegment, 10)}, [2]string{"lease file", c.g.leaseFile})
	return nil
}

// segFlag registers --segment.
func segFlag(fs *flag.FlagSet) *uint64 {
	return fs.Uint64("segment", 0, "segment number (default: the lease file's next segment)")
}
