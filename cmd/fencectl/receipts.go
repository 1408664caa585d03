package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

func init() {
	register("receipts", verb{usage: "receipts --operation ID | --resource R [--limit N] [--cursor C]", help: "list an operation's (or a resource's) receipts, a page at a time (ask this first when recovering)", flags: receiptsFlags})
	register("unknown", verb{usage: "unknown [--limit N] [--cursor C]", help: "list effects whose outcome is still unknown", flags: unknownFlags})
	register("resource", verb{usage: "resource NAME", nargs: 1, help: "show a resource's fence state", flags: resourceFlags})
	register("quarantine", verb{usage: "quarantine [--resource R] [--limit N] [--cursor C]", help: "list quarantined segments, a page at a time", flags: quarantineFlags})
	register("show-quarantine", verb{usage: "show-quarantine ID", nargs: 1, help: "show a quarantined request and its payload beside the accepted one", flags: showQuarantineFlags})
}

// pageFlags adds --limit and --cursor to a listing verb.
func pageFlags(fs *flag.FlagSet) *fencegate.Page {
	p := &fencegate.Page{}
	fs.Var(pageLimit{&p.Limit}, "limit", fmt.Sprintf("items per page, a `number` from 1 to %d (default %d)", fencegate.MaxPageLimit, fencegate.DefaultPageLimit))
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

// receiptTable prints list one receipt a line. Its last column, DELEGATE,
// names the delegate and delegation that made a delegated write ("-" for
// the owner's own): always there, so every page of a list has the same
// columns.
func receiptTable(c *cmd, list []fencegate.Receipt, overdue map[string]bool) {
	if len(list) == 0 {
		fmt.Fprintln(c.out, "no receipts")
		return
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RECEIPT\tSTATE\tFENCE\tSEGMENT\tMETHOD\tTARGET\tOPERATION\tCREATED\tDELEGATE")
	for _, r := range list {
		st := string(r.State)
		if overdue[r.ID] {
			st += " (overdue: reconcile by hand)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.ID, st, r.FenceToken, r.Segment, r.Method, r.Target,
			r.OperationID, r.CreatedAt.Format(time.RFC3339), delegateText(r.Delegate, r.DelegationID))
	}
	tw.Flush()
}

// delegateText names the delegate and delegation of a delegated write (a
// receipt's or a quarantine record's): "consumer (dlg_1)"; "-" for the
// owner's own write.
func delegateText(delegate, delegationID string) string {
	if delegate == "" {
		return "-"
	}
	return delegate + " (" + delegationID + ")"
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
	page := pageFlags(fs)
	return func(ctx context.Context, c *cmd) error {
		p, err := c.client.QuarantinePage(ctx, *res, *page)
		if err != nil {
			return err
		}
		if c.g.json {
			return emit(c.out, p)
		}
		quarantineTable(c, p.Records)
		verb := "quarantine"
		if *res != "" {
			verb += " --resource " + *res
		}
		if page.Limit > 0 {
			verb += " --limit " + strconv.Itoa(page.Limit)
		}
		nextHint(c, verb, p.Next)
		return nil
	}
}

// showQuarantineFlags prints one quarantine record beside the accepted
// receipt: their fields in two columns, then both payloads.
func showQuarantineFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	return func(ctx context.Context, c *cmd) error {
		v, err := c.client.QuarantineRecord(ctx, c.args[0])
		if err != nil {
			return err
		}
		if c.g.json {
			return emit(c.out, v)
		}
		q, a := v.Quarantine, v.Accepted
		tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "\tREFUSED (%s)\tACCEPTED (%s)\n", q.ID, a.ID)
		rows := [][3]string{
			{"resource", q.Resource, a.Resource},
			{"fence / segment", fmt.Sprintf("%d / %d", q.FenceToken, q.Segment), fmt.Sprintf("%d / %d", a.FenceToken, a.Segment)},
			{"method", q.Method, a.Method},
			{"target", q.Target, a.Target},
			{"effect key", q.EffectKey, a.EffectKey},
			{"payload digest", q.PayloadDigest, a.PayloadDigest},
			{"owner", q.Owner, a.Owner},
			{"when", fmt.Sprintf("%s (last %s, %d attempts)", q.At.Format(time.RFC3339), q.LastAt.Format(time.RFC3339), q.Attempts), a.CreatedAt.Format(time.RFC3339)},
			{"state", "QUARANTINED (nothing forwarded)", string(a.State)},
		}
		if q.Delegate != "" || a.Delegate != "" {
			// Who sent each when a delegate did: the refused request's
			// first sender, the accepted write's maker.
			rows = slices.Insert(rows, 7, [3]string{"delegate", delegateText(q.Delegate, q.DelegationID), delegateText(a.Delegate, a.DelegationID)})
		}
		for _, row := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", row[0], row[1], row[2])
		}
		tw.Flush()
		fmt.Fprintf(c.out, "\nrefused payload (%d bytes):\n", q.PayloadSize)
		printPayload(c, q.Payload, q.PayloadKept, "not kept: larger than the gateway's quarantine bound; digest and size only")
		fmt.Fprintln(c.out, "\naccepted payload:")
		printPayload(c, v.AcceptedPayload, v.AcceptedPayloadKept, v.AcceptedPayloadNote)
		return nil
	}
}

// printPayload prints a payload as text when it is printable UTF-8, else in
// hex, at most 4 KiB of it.
func printPayload(c *cmd, p []byte, kept bool, why string) {
	if !kept {
		fmt.Fprintf(c.out, "  (%s)\n", why)
		return
	}
	shown, more := p, ""
	if len(shown) > 4096 {
		shown, more = shown[:4096], fmt.Sprintf("\n  ... %d more bytes (use --json)", len(p)-4096)
	}
	if utf8.Valid(shown) && !bytes.ContainsFunc(shown, func(r rune) bool { return r < 0x20 && r != '\n' && r != '\t' && r != '\r' }) {
		fmt.Fprintf(c.out, "  %s%s\n", strings.ReplaceAll(string(shown), "\n", "\n  "), more)
		return
	}
	fmt.Fprintf(c.out, "  hex: %x%s\n", shown, more)
}

// quarantineTable prints list one record a line. Its last column, DELEGATE,
// names the delegate and delegation that first sent a refused delegated
// write ("-" for the owner's own, and for a record written before delegates
// were recorded): always there, so every page of a list has the same columns.
func quarantineTable(c *cmd, list []fencegate.Quarantine) {
	if len(list) == 0 {
		fmt.Fprintln(c.out, "nothing quarantined")
		return
	}
	tw := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUARANTINE\tRESOURCE\tFENCE\tSEGMENT\tACCEPTED RECEIPT\tPAYLOAD\tSIZE\tATTEMPTS\tFIRST\tDELEGATE")
	for _, q := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n", q.ID, q.Resource, q.FenceToken, q.Segment, q.ReceiptID, q.PayloadDigest,
			q.PayloadSize, q.Attempts, q.At.Format(time.RFC3339), delegateText(q.Delegate, q.DelegationID))
	}
	tw.Flush()
}
