package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

func init() {
	register("delegate", verb{usage: "delegate IDENTITY --segments FROM-TO|N,N,... [--prefix RESOURCE]", nargs: 1,
		help: "let IDENTITY write under the lease in the lease file for those segments; prints the delegation token", flags: delegateFlags})
	register("revoke-delegation", verb{usage: "revoke-delegation ID", nargs: 1,
		help: "revoke a delegation of your lease: its delegate gets no status proof from now on", flags: revokeDelegationFlags})
}

// parseSegments reads "FROM-TO" (a range) or "N,N,..." (a set) and checks
// them by the domain's rule (fencegate.CheckDelegatedSegments: a range from
// 1 upwards, or a set of distinct numbers from 1, at most
// fencegate.MaxDelegationSegments of them), which the registry would refuse
// otherwise: anything else is refused here, before the lease file is read.
func parseSegments(s string) (from, to uint64, set []uint64, err error) {
	if a, b, ok := strings.Cut(s, "-"); ok {
		from, err = strconv.ParseUint(a, 10, 64)
		if err == nil {
			to, err = strconv.ParseUint(b, 10, 64)
		}
	} else {
		for _, f := range strings.Split(s, ",") {
			n, perr := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if perr != nil {
				err = perr
				break
			}
			set = append(set, n)
		}
	}
	if err != nil {
		return 0, 0, nil, fmt.Errorf("must be FROM-TO or N,N,... (%v)", err)
	}
	if err := fencegate.CheckDelegatedSegments(from, to, set); err != nil {
		return 0, 0, nil, errors.New(fencegate.ErrorMessage(err))
	}
	return from, to, set, nil
}

func delegateFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	segs := fs.String("segments", "", "delegated segments: FROM-TO or N,N,... (required)")
	prefix := fs.String("prefix", "", "only targets inside this resource subtree of the lease's resource")
	return func(ctx context.Context, c *cmd) error {
		if *segs == "" {
			return usageError{"--segments is required"}
		}
		from, to, set, err := parseSegments(*segs)
		if err != nil {
			return usageError{fmt.Sprintf("--segments %s: %v", *segs, err)}
		}
		lf, err := loadLease(c.g.leaseFile)
		if err != nil {
			return err
		}
		defer lf.close()
		// Segments in doubt are settled first, as Lease.Delegate does: one
		// admitted is the lease's own, and one unsettled refuses.
		if _, err := settleDoubt(ctx, c, lf, 0, fencedWrite{}); err != nil {
			return err
		}
		p := client.DelegateParams{Delegate: c.args[0], SegmentFrom: from, SegmentTo: to, Segments: set, TargetPrefix: *prefix}
		top, err := client.CheckDelegable(p, lf.NextSegment) // as Lease.Delegate checks
		if err != nil {
			return err
		}
		d, err := c.client.Delegate(ctx, lf.Lease.Lease, lf.Lease.GrantDigest, p)
		if err != nil {
			return err
		}
		// The owner's own writes number after the delegated segments.
		var rerr error
		if was := lf.NextSegment; top >= was {
			lf.NextSegment = top + 1
			if err := lf.save(c.g.leaseFile); err != nil {
				// The delegation is minted (shown below): the owner's next
				// write must still number after it.
				rerr = notRecorded{fmt.Sprintf("the delegation was minted, but the lease file %s still names segment %d (%v): give your next write --segment %d",
					c.g.leaseFile, was, err, top+1), err}
			}
		}
		if c.g.json {
			if err := emit(c.out, d); err != nil {
				return err
			}
			return rerr
		}
		table(c.out, [2]string{"delegation", d.ID}, [2]string{"delegate", d.Claims.Delegate},
			[2]string{"segments", d.Claims.SegmentsText()}, [2]string{"fence", strconv.FormatUint(d.Claims.FenceToken, 10)},
			[2]string{"grant", lf.Lease.Grant}, [2]string{"token", d.Delegation})
		return rerr
	}
}

func revokeDelegationFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	return func(ctx context.Context, c *cmd) error {
		if err := c.client.RevokeDelegation(ctx, c.args[0]); err != nil {
			return err
		}
		if c.g.json {
			return emit(c.out, map[string]any{"id": c.args[0], "revoked": true})
		}
		fmt.Fprintf(c.out, "delegation %s revoked\n", c.args[0])
		return nil
	}
}
