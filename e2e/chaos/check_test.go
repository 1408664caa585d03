package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/history"
)

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// receipts lists every receipt of resource res through replica rep,
// following the pages of GET /v1/receipts?resource=.
func (c *cluster) receipts(ctx context.Context, rep int, res string) ([]fencegate.Receipt, error) {
	var all []fencegate.Receipt
	cursor := ""
	for {
		path := "/v1/receipts?resource=" + url.QueryEscape(res) + "&cursor=" + url.QueryEscape(cursor)
		a, err := exchange(ctx, c.replicas[rep].base(), "GET", path, c.tokens[0], nil, nil)
		if err != nil {
			return nil, err
		}
		var page struct {
			Receipts []fencegate.Receipt `json:"receipts"`
			Next     string              `json:"next"`
		}
		if a.status != http.StatusOK || json.Unmarshal(a.body, &page) != nil {
			return nil, fmt.Errorf("receipts of %s at replica %d: %d %s", res, rep, a.status, a.body)
		}
		all = append(all, page.Receipts...)
		if page.Next == "" || len(page.Receipts) == 0 && page.Next == cursor {
			return all, nil
		}
		cursor = page.Next
	}
}

// unknownCount is the length of GET /v1/unknown at replica rep.
func (c *cluster) unknownCount(ctx context.Context, rep int) (int, error) {
	a, err := exchange(ctx, c.replicas[rep].base(), "GET", "/v1/unknown", c.tokens[0], nil, nil)
	if err != nil {
		return 0, err
	}
	var list struct {
		Receipts []json.RawMessage `json:"receipts"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &list) != nil {
		return 0, fmt.Errorf("unknown list at replica %d: %d %s", rep, a.status, a.body)
	}
	return len(list.Receipts), nil
}

// settle waits (up to limit) until every receipt of every resource is in a
// final state and no replica lists an UNKNOWN; it returns the receipts by
// resource as they are then, and what was still open if the wait ran out.
func (c *cluster) settle(ctx context.Context, limit time.Duration) (map[string][]fencegate.Receipt, []string) {
	deadline := time.Now().Add(limit)
	for {
		all := map[string][]fencegate.Receipt{}
		var open []string
		for _, res := range c.resources {
			list, err := c.receipts(ctx, 0, res)
			if err != nil {
				open = append(open, err.Error())
				continue
			}
			all[res] = list
			for _, r := range list {
				if !r.State.Terminal() {
					open = append(open, fmt.Sprintf("%s fence %d segment %d %s (%s)", res, r.FenceToken, r.Segment, r.State, r.Error))
				}
			}
		}
		for i := range c.replicas {
			n, err := c.unknownCount(ctx, i)
			if err != nil || n > 0 {
				open = append(open, fmt.Sprintf("replica %d lists %d UNKNOWN (%v)", i, n, err))
			}
		}
		if len(open) == 0 || time.Now().After(deadline) {
			return all, open
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// verdict is what the end-of-run check counts; every count but the totals
// must be zero.
type verdict struct {
	staleAccepted   []string // an accepted write below a fence whose write completed before it began
	lostReceipts    []string // a write answered 2xx whose receipt is missing or says otherwise
	refusedBytes    []string // an object (read or final) holding a refused write's bytes
	unsettled       []string // a receipt still PENDING or UNKNOWN after the settle wait
	finalMismatch   []string // a final object that is not the last committed write
	spuriousStale   []string // STALE_OWNER with no higher fence admitted before the answer
	fenceReuse      []string // two leases of one resource with one fence, or FENCE_REGRESSION
	settledUnknowns map[fencegate.ReceiptState]int
	settled         settledAs // what became of each write answered Unknown
}

func (v verdict) failures() map[string][]string {
	return map[string][]string{
		"stale writes accepted":                               v.staleAccepted,
		"receipts lost for writes answered 2xx":               v.lostReceipts,
		"objects holding a refused write's bytes":             v.refusedBytes,
		"UNKNOWN or PENDING left unsettled":                   v.unsettled,
		"final objects not the last committed write":          v.finalMismatch,
		"STALE_OWNER answers without a higher admitted fence": v.spuriousStale,
		"fences handed out twice or regressed":                v.fenceReuse,
	}
}

// judge checks the journal against the receipts and the objects as they are
// after the settle wait.
func (c *cluster) judge(ops []*op, receipts map[string][]fencegate.Receipt, open []string, final map[string]string) verdict {
	v := verdict{unsettled: open, settledUnknowns: map[fencegate.ReceiptState]int{}, settled: settledAs{}}
	type rkey struct {
		res    string
		fence  uint64
		seg    uint64
		digest string
	}
	byKey := map[rkey]fencegate.Receipt{}
	byID := map[string]fencegate.Receipt{}
	for res, list := range receipts {
		for _, r := range list {
			byKey[rkey{res, r.FenceToken, r.Segment, r.PayloadDigest}] = r
			byID[r.ID] = r
		}
	}
	// Which writes took effect, as far as anyone can know now.
	committed := map[*op]bool{}
	refused := map[string]*op{} // value -> a write known not to have taken effect
	for _, o := range ops {
		if o.kind != history.Write {
			continue
		}
		r, found := byKey[rkey{o.resource, o.fence, o.seg, digestOf(o.value)}]
		switch o.out {
		case history.OK:
			committed[o] = true
			got, ok := byID[o.receipt]
			if !ok || got.State != fencegate.ReceiptCommitted || got.FenceToken != o.fence || got.Segment != o.seg ||
				got.PayloadDigest != digestOf(o.value) {
				v.lostReceipts = append(v.lostReceipts, fmt.Sprintf("%s fence %d segment %d answered 2xx with receipt %q; stored: %+v",
					o.resource, o.fence, o.seg, o.receipt, got))
			}
		case history.Unknown:
			switch {
			case !found:
				refused[o.value] = o // never admitted
				v.settledUnknowns["never admitted"]++
				v.settled[o] = history.Refused
			case r.State == fencegate.ReceiptCommitted:
				committed[o] = true
				v.settledUnknowns[r.State]++
				v.settled[o] = history.OK
			case r.State.NotApplied():
				refused[o.value] = o
				v.settledUnknowns[r.State]++
				v.settled[o] = history.NotApplied
			default: // still open: the wait ran out, counted in unsettled
				v.settledUnknowns[r.State]++
			}
		case history.Refused, history.Stale, history.NotApplied:
			refused[o.value] = o
			if found && r.State == fencegate.ReceiptCommitted {
				v.refusedBytes = append(v.refusedBytes, fmt.Sprintf("%s fence %d segment %d answered %d %s but its receipt %s is COMMITTED",
					o.resource, o.fence, o.seg, o.status, o.code, r.ID))
			}
		}
	}
	// Stale: an accepted write whose fence is below that of a write whose
	// success had been answered before it was even sent.
	for _, a := range ops {
		if a.kind != history.Write || a.out != history.OK {
			continue
		}
		for _, b := range ops {
			if b.kind == history.Write && b.out == history.OK && b.resource == a.resource && b.fence > a.fence && b.ret < a.call {
				v.staleAccepted = append(v.staleAccepted, fmt.Sprintf("%s: fence %d segment %d (worker %d, replica %d) accepted after fence %d segment %d had been answered",
					a.resource, a.fence, a.seg, a.client, a.replica, b.fence, b.seg))
				break
			}
		}
	}
	// The registry (on etcd, through member kills and leader moves) hands out
	// each fence of a resource to one lease only, and never one at or below
	// what the resource has seen.
	leaseOf := map[rkey]string{}
	for _, o := range ops {
		if o.kind != history.Write {
			continue
		}
		k := rkey{res: o.resource, fence: o.fence}
		if l, seen := leaseOf[k]; seen && l != o.lease {
			v.fenceReuse = append(v.fenceReuse, fmt.Sprintf("%s fence %d went to leases %s and %s", o.resource, o.fence, l, o.lease))
		}
		leaseOf[k] = o.lease
		if o.code == string(fencegate.CodeFenceRegression) {
			v.fenceReuse = append(v.fenceReuse, fmt.Sprintf("%s fence %d (lease %s) refused FENCE_REGRESSION", o.resource, o.fence, o.lease))
		}
	}
	// A stale refusal names a higher fence that had been admitted: a write
	// with a higher fence that has a receipt and was sent before the answer.
	for _, s := range ops {
		if s.kind != history.Write || s.out != history.Stale {
			continue
		}
		justified := false
		for _, b := range ops {
			if b.kind == history.Write && b.resource == s.resource && b.fence > s.fence && b.call < s.ret {
				if _, admitted := byKey[rkey{b.resource, b.fence, b.seg, digestOf(b.value)}]; admitted {
					justified = true
					break
				}
			}
		}
		if !justified {
			v.spuriousStale = append(v.spuriousStale, fmt.Sprintf("%s fence %d segment %d (worker %d, replica %d) refused STALE_OWNER",
				s.resource, s.fence, s.seg, s.client, s.replica))
		}
	}
	// No read and no final object holds the bytes of a write that did not take effect.
	for _, o := range ops {
		if o.kind == history.Read && o.transport == "" && o.value != "" {
			if w, bad := refused[o.value]; bad {
				v.refusedBytes = append(v.refusedBytes, fmt.Sprintf("read of %s returned %q, refused as %s %s", o.resource, o.value, w.out, w.code))
			}
		}
	}
	for res, val := range final {
		if w, bad := refused[val]; bad {
			v.refusedBytes = append(v.refusedBytes, fmt.Sprintf("object %s holds %q, refused as %s %s", res, val, w.out, w.code))
		}
		var last *fencegate.Receipt
		for i, r := range receipts[res] {
			if r.State == fencegate.ReceiptCommitted && (last == nil || r.FenceToken > last.FenceToken ||
				(r.FenceToken == last.FenceToken && r.Segment > last.Segment)) {
				last = &receipts[res][i]
			}
		}
		switch {
		case last == nil && val != "":
			v.finalMismatch = append(v.finalMismatch, fmt.Sprintf("object %s holds %q but no receipt is COMMITTED", res, val))
		case last != nil && last.PayloadDigest != digestOf(val):
			v.finalMismatch = append(v.finalMismatch, fmt.Sprintf("object %s holds %q, not the write of the last committed receipt %s (fence %d segment %d)",
				res, val, last.ID, last.FenceToken, last.Segment))
		}
	}
	return v
}

// summary tells what the run did: operations by outcome and answer code.
func summary(ops []*op) string {
	n := map[string]int{}
	for _, o := range ops {
		switch o.kind {
		case history.Read:
			if o.transport != "" {
				n["read (failed)"]++
			} else {
				n["read"]++
			}
		case history.Write:
			k := "write " + o.out.String()
			if o.code != "" {
				k += " " + o.code
			} else if o.transport != "" {
				k += " (no answer)"
			}
			n[k]++
		}
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-40s %d\n", k+":", n[k])
	}
	return b.String()
}
