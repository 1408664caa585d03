package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate"
)

func init() {
	register("receipts", verb{usage: "receipts --operation ID", help: "list an operation's receipts (ask this first when recovering)", flags: receiptsFlags})
	register("unknown", verb{usage: "unknown", help: "list effects whose outcome is still unknown", flags: unknownFlags})
	register("resource", verb{usage: "resource NAME", nargs: 1, help: "show a resource's fence state", flags: resourceFlags})
	register("quarantine", verb{usage: "quarantine [--resource R]", help: "list quarantined segments", flags: quarantineFlags})
}

func receiptsFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	op := fs.String("operation", "", "operation ID (required)")
	return func(ctx context.Context, c *cmd) error {
		if *op == "" {
			return usageError{"--operation is required"}
		}
		list, err := c.client.Receipts(ctx, *op)
		if err != nil {
			return err
		}
		if c.g.json {
			return emit(c.out, map[string]any{"receipts": list})
		}
		receiptTable(c, list, nil)
		return nil
	}
}

func unknownFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	return func(ctx context.Context, c *cmd) error {
		list, err := c.client.Unknown(ctx)
		if err != nil {
			return err
		}
		if c.g.json {
			return emit(c.out, map[string]any{"receipts": list})
		}
		rs := make([]fencegate.Receipt, len(list))
		overdue := map[string]bool{}
		for i, u := range list {
			rs[i] = u.Receipt
			overdue[u.ID] = u.Overdue
		}
		receiptTable(c, rs, overdue)
		return nil
	}
}

func receiptTable(c *cmd, list []fencegate.Receipt, overdue map[string]bool) {
	if len(list) == 0 {
		fmt.Fprintln(c.out, "no receipts")
		return
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RECEIPT\tSTATE\tFENCE\tSEGMENT\tMETHOD\tTARGET\tOPERATION\tCREATED")
	for _, r := range list {
		st := string(r.State)
		if overdue[r.ID] {
			st += " (overdue: reconcile by hand)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", r.ID, st, r.FenceToken, r.Segment, r.Method, r.Target,
			r.OperationID, r.CreatedAt.Format(time.RFC3339))
	}
	tw.Flush()
}

func resourceFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	return func(ctx context.Context, c *cmd) error {
		st, err := c.client.Resource(ctx, c.args[0])
		if err != nil {
			return err
		}
		if c.g.json {
			return emit(c.out, st)
		}
		table(c.out, [2]string{"resource", st.Resource}, [2]string{"highest fence", strconv.FormatUint(st.HighestFence, 10)},
			[2]string{"last segment", strconv.FormatUint(st.LastSegmentSeq, 10)}, [2]string{"lease", st.Lease},
			[2]string{"root", st.Root}, [2]string{"pending receipt", st.PendingReceipt},
			[2]string{"updated", st.UpdatedAt.Format(time.RFC3339)})
		return nil
	}
}

func quarantineFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	res := fs.String("resource", "", "only this resource")
	return func(ctx context.Context, c *cmd) error {
		list, err := c.client.Quarantine(ctx, *res)
		if err != nil {
			return err
		}
		if c.g.json {
			return emit(c.out, map[string]any{"quarantine": list})
		}
		quarantineTable(c, list)
		return nil
	}
}

func quarantineTable(c *cmd, list []fencegate.Quarantine) {
	if len(list) == 0 {
		fmt.Fprintln(c.out, "nothing quarantined")
		return
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tFENCE\tSEGMENT\tRECEIPT\tPAYLOAD\tOWNER\tAT")
	for _, q := range list {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", q.Resource, q.FenceToken, q.Segment, q.ReceiptID, q.PayloadDigest,
			q.Owner, q.At.Format(time.RFC3339))
	}
	tw.Flush()
}
