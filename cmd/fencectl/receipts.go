package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

func init() {
	register("receipts", verb{usage: "receipts --operation ID | --resource R [--limit N] [--cursor C]", help: "list an operation's (or a resource's) receipts, a page at a time (ask this first when recovering)", flags: receiptsFlags})
	register("unknown", verb{usage: "unknown [--limit N] [--cursor C]", help: "list effects whose outcome is still unknown", flags: unknownFlags})
	register("resource", verb{usage: "resource NAME", nargs: 1, help: "show a resource's fence state", flags: resourceFlags})
	register("quarantine", verb{usage: "quarantine [--resource R]", help: "list quarantined segments", flags: quarantineFlags})
}

// pageFlags adds --limit and --cursor to a listing verb.
func pageFlags(fs *flag.FlagSet) *fencegate.Page {
	p := &fencegate.Page{}
	fs.IntVar(&p.Limit, "limit", 0, fmt.Sprintf("receipts per page (default %d, at most %d)", fencegate.DefaultPageLimit, fencegate.MaxPageLimit))
	fs.StringVar(&p.Cursor, "cursor", "", "the next cursor a previous page printed")
	return p
}

// nextHint tells how to read the page after this one.
func nextHint(c *cmd, verb, next string) {
	if next != "" {
		fmt.Fprintf(c.out, "more: fencectl %s --cursor %s\n", verb, next)
	}
}

func receiptsFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	op := fs.String("operation", "", "operation ID")
	res := fs.String("resource", "", "resource (when no --operation is given)")
	page := pageFlags(fs)
	return func(ctx context.Context, c *cmd) error {
		if *op == "" && *res == "" {
			return usageError{"--operation or --resource is required"}
		}
		p, err := c.client.ReceiptPage(ctx, client.ReceiptQuery{OperationID: *op, Resource: *res}, *page)
		if err != nil {
			return err
		}
		if c.g.json {
			return emit(c.out, p)
		}
		receiptTable(c, p.Receipts, nil)
		verb := "receipts --operation " + *op
		if *op == "" {
			verb = "receipts --resource " + *res
		}
		if page.Limit > 0 {
			verb += " --limit " + strconv.Itoa(page.Limit)
		}
		nextHint(c, verb, p.Next)
		return nil
	}
}

func unknownFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	page := pageFlags(fs)
	return func(ctx context.Context, c *cmd) error {
		p, err := c.client.UnknownPage(ctx, *page)
		if err != nil {
			return err
		}
		if c.g.json {
			return emit(c.out, p)
		}
		rs := make([]fencegate.Receipt, len(p.Receipts))
		overdue := map[string]bool{}
		for i, u := range p.Receipts {
			rs[i] = u.Receipt
			overdue[u.ID] = u.Overdue
		}
		receiptTable(c, rs, overdue)
		verb := "unknown"
		if page.Limit > 0 {
			verb += " --limit " + strconv.Itoa(page.Limit)
		}
		nextHint(c, verb, p.Next)
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
