package handlers

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// The console's read-only pages. They read through the same store paths and
// pages (limit, cursor) as the REST routes; the console's callers are admins,
// who read every resource.

func (s *Server) consoleHome(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	data := map[string]any{}
	if unk, err := s.Gateway.Store().ReceiptsByState(ctx, fencegate.ReceiptUnknown, fencegate.Page{}); err == nil {
		overdue := 0
		for _, rc := range unk.Receipts {
			if s.Reconciler != nil && s.Reconciler.IsOverdue(rc) {
				overdue++
			}
		}
		data["Unknown"], data["Overdue"], data["UnknownMore"] = len(unk.Receipts), overdue, unk.Next != ""
	}
	if q, err := s.Gateway.Store().Quarantined(ctx, "", fencegate.Page{}); err == nil {
		data["Quarantined"], data["QuarantineMore"] = len(q.Records), q.Next != ""
	}
	data["Shadowed"] = len(s.Gateway.Refusals().Shadowed())
	data["Recent"] = s.Gateway.Refusals().Resources("")
	s.render(w, r, http.StatusOK, "home", data)
}

// consoleSearch finds what q names: a resource, a receipt, a quarantine
// record or an operation ID, in that order; otherwise it lists the
// resources with recent refusals whose name contains q.
func (s *Server) consoleSearch(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	st := s.Gateway.Store()
	go2 := func(path string, v url.Values) {
		http.Redirect(w, r, path+"?"+v.Encode(), http.StatusSeeOther)
	}
	if q != "" {
		if fencegate.CheckName(q) == nil {
			if _, err := st.Resource(ctx, q); err == nil {
				go2("/console/resource", url.Values{"name": {q}})
				return
			}
		}
		if _, err := st.Receipt(ctx, q); err == nil {
			go2("/console/receipt", url.Values{"id": {q}})
			return
		}
		if _, err := st.QuarantineRecord(ctx, q); err == nil {
			http.Redirect(w, r, "/console/quarantine/"+url.PathEscape(q), http.StatusSeeOther)
			return
		}
		if ops, err := st.ReceiptsByOperation(ctx, q, fencegate.Page{Limit: 1}); err == nil && len(ops.Receipts) > 0 {
			go2("/console/operation", url.Values{"id": {q}})
			return
		}
	}
	s.render(w, r, http.StatusOK, "search", map[string]any{"Q": q, "Matches": s.Gateway.Refusals().Resources(q)})
}

// timelineEntry is one event of a resource's fence timeline: an admitted
// segment (its receipt) or a refused write (from the gateway's journal).
type timelineEntry struct {
	At         time.Time
	FenceToken uint64
	Segment    uint64
	Owner      string
	Lease      string
	Target     string
	Receipt    *fencegate.Receipt
	Refusal    *gateway.Refusal
}

// fenceHolder is one fence of a resource: who held it, when it was seen,
// which segments landed (COMMITTED) and how many of its writes were refused.
type fenceHolder struct {
	FenceToken  uint64
	Owner       string
	Lease       string
	First, Last time.Time
	Landed      []uint64
	Refused     int
}

// consoleResource shows a resource's fence state, its fences, its timeline
// (one page of receipts, with the refusals kept between them) and its
// quarantine.
func (s *Server) consoleResource(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q, page, err := listQuery(r)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	name := q.Get("name")
	if err := fencegate.CheckName(name); err != nil {
		s.consoleError(w, r, err)
		return
	}
	data := map[string]any{"Name": name, "Mode": s.Gateway.Modes().For(name)}
	if rule, ok := s.Gateway.Modes().Match(name); ok {
		data["Rule"] = rule
	}
	st, err := s.Gateway.Store().Resource(ctx, name)
	switch {
	case err == nil:
		data["State"] = st
	case fencegate.ErrorCode(err) != fencegate.CodeNotFound:
		s.consoleError(w, r, err)
		return
	}
	rcs, err := s.Gateway.Store().ReceiptsByResource(ctx, name, page)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	// The page's window of time: from where the previous page ended (from,
	// carried in the next link) to its last receipt when more follow.
	var from, until time.Time
	if v, err := strconv.ParseInt(q.Get("from"), 10, 64); err == nil && page.Cursor != "" {
		from = time.UnixMicro(v)
	}
	if rcs.Next != "" && len(rcs.Receipts) > 0 {
		until = rcs.Receipts[len(rcs.Receipts)-1].CreatedAt
		data["Next"] = nextQuery(url.Values{"name": {name}, "cursor": {rcs.Next}, "from": {strconv.FormatInt(until.UnixMicro(), 10)}})
	}
	var events []timelineEntry
	for i := range rcs.Receipts {
		rc := &rcs.Receipts[i]
		events = append(events, timelineEntry{At: rc.CreatedAt, FenceToken: rc.FenceToken, Segment: rc.Segment,
			Owner: rc.Owner, Lease: rc.Lease, Target: rc.Target, Receipt: rc})
	}
	refusals := s.Gateway.Refusals().Of(name)
	for i := range refusals {
		f := &refusals[i]
		if (!from.IsZero() && f.At.Before(from)) || (!until.IsZero() && !f.At.Before(until)) {
			continue
		}
		events = append(events, timelineEntry{At: f.At, FenceToken: f.FenceToken, Segment: f.Segment,
			Owner: f.Owner, Lease: f.Lease, Target: f.Target, Refusal: f})
	}
	slices.SortStableFunc(events, func(a, b timelineEntry) int { return a.At.Compare(b.At) })
	data["Timeline"], data["Fences"] = events, fenceHolders(events)
	if q, err := s.Gateway.Store().Quarantined(ctx, name, fencegate.Page{Limit: 20}); err == nil {
		data["Quarantine"], data["QuarantineMore"] = q.Records, q.Next != ""
	}
	s.render(w, r, http.StatusOK, "resource", data)
}

// fenceHolders summarises a timeline by fence, lowest first.
func fenceHolders(events []timelineEntry) []fenceHolder {
	by := map[uint64]*fenceHolder{}
	var order []uint64
	for _, e := range events {
		if e.FenceToken == 0 {
			continue
		}
		h, ok := by[e.FenceToken]
		if !ok {
			h = &fenceHolder{FenceToken: e.FenceToken, Owner: e.Owner, Lease: e.Lease, First: e.At}
			by[e.FenceToken] = h
			order = append(order, e.FenceToken)
		}
		h.Last = e.At
		switch {
		case e.Refusal != nil:
			h.Refused++
		case e.Receipt.State == fencegate.ReceiptCommitted:
			h.Landed = append(h.Landed, e.Segment)
		}
	}
	slices.Sort(order)
	out := make([]fenceHolder, 0, len(order))
	for _, f := range order {
		out = append(out, *by[f])
	}
	return out
}

// consoleSegment finds the live receipt of one segment of a resource.
func (s *Server) consoleSegment(w http.ResponseWriter, r *http.Request) {
	q, err := strictQuery(r)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	fence, seg, err := segmentQuery(q)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	rc, err := s.Gateway.Store().ReceiptAt(r.Context(), q.Get("resource"), fence, seg)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	http.Redirect(w, r, "/console/receipt?"+url.Values{"id": {rc.ID}}.Encode(), http.StatusSeeOther)
}

// unknownRow is an UNKNOWN receipt with its age and whether a person must
// settle it now.
type unknownRow struct {
	fencegate.Receipt
	Age     time.Duration
	Overdue bool
	Awaits  bool
}

func (s *Server) unknownRow(rc fencegate.Receipt) unknownRow {
	u := unknownRow{Receipt: rc, Age: s.Now().Sub(rc.CreatedAt).Round(time.Second), Awaits: true}
	if s.Reconciler != nil {
		u.Overdue, u.Awaits = s.Reconciler.IsOverdue(rc), s.Reconciler.AwaitsPerson(rc)
	}
	return u
}

func (s *Server) consoleReceipt(w http.ResponseWriter, r *http.Request) {
	rc, err := s.Gateway.Store().Receipt(r.Context(), r.URL.Query().Get("id"))
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	data := map[string]any{"R": rc, "Resolved": s.takeFlash(r) == "resolved "+rc.ID}
	if rc.State == fencegate.ReceiptUnknown {
		data["Unknown"] = s.unknownRow(rc)
	}
	s.render(w, r, http.StatusOK, "receipt", data)
}

func (s *Server) consoleOperation(w http.ResponseWriter, r *http.Request) {
	q, page, err := listQuery(r)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	id := q.Get("id")
	list, err := s.Gateway.Store().ReceiptsByOperation(r.Context(), id, page)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	data := map[string]any{"ID": id, "Receipts": list.Receipts}
	if list.Next != "" {
		data["Next"] = nextQuery(url.Values{"id": {id}, "cursor": {list.Next}})
	}
	s.render(w, r, http.StatusOK, "operation", data)
}

func (s *Server) consoleUnknown(w http.ResponseWriter, r *http.Request) {
	page, err := pageOf(r)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	list, err := s.Gateway.Store().ReceiptsByState(r.Context(), fencegate.ReceiptUnknown, page)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	rows := make([]unknownRow, 0, len(list.Receipts))
	for _, rc := range list.Receipts {
		rows = append(rows, s.unknownRow(rc))
	}
	data := map[string]any{"Rows": rows}
	if list.Next != "" {
		data["Next"] = nextQuery(url.Values{"cursor": {list.Next}})
	}
	s.render(w, r, http.StatusOK, "unknown", data)
}
