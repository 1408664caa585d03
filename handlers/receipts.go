package handlers

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/go-chi/chi/v5"
)

// listReceipts answers GET /v1/receipts?operationId=..., ?resource=...
// (both paged: limit, cursor) or ?resource=...&fence=...&segment=... (the
// segment's live receipt, a list of at most one). The query is parsed
// strictly (listQuery) and resource must be a canonical name
// (fencegate.CheckName) in both of its forms.
func (s *Server) listReceipts(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q, page, err := listQuery(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	var out fencegate.ReceiptPage
	switch {
	case q.Get("operationId") != "":
		out, err = s.Gateway.Store().ReceiptsByOperation(ctx, q.Get("operationId"), page)
	case q.Get("resource") != "" && !q.Has("fence") && !q.Has("segment"):
		if err = s.checkReadName(callerOf(r), q.Get("resource")); err == nil {
			out, err = s.Gateway.Store().ReceiptsByResource(ctx, q.Get("resource"), page)
		}
	case q.Get("resource") != "":
		if err = s.checkReadName(callerOf(r), q.Get("resource")); err != nil {
			break
		}
		var fence, seg uint64
		if fence, seg, err = segmentQuery(q); err != nil {
			break
		}
		var rc fencegate.Receipt
		rc, err = s.Gateway.Store().ReceiptAt(ctx, q.Get("resource"), fence, seg)
		out.Receipts = []fencegate.Receipt{}
		if fencegate.ErrorCode(err) == fencegate.CodeNotFound {
			err = nil
		} else if err == nil {
			out.Receipts = append(out.Receipts, rc)
		}
	default:
		err = fencegate.Errorf(fencegate.CodeInvalidRequest, "give operationId, or resource (with fence and segment for one segment)")
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	// Receipts the caller may not read are left out: a page may hold fewer
	// than limit, and next still goes on from the last one read.
	out.Receipts = s.readableReceipts(callerOf(r), out.Receipts)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getReceipt(w http.ResponseWriter, r *http.Request) {
	rc, err := s.Gateway.Store().Receipt(r.Context(), chi.URLParam(r, "id"))
	if err == nil {
		err = s.checkRead(callerOf(r), rc.Resource)
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rc)
}

func (s *Server) getResource(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/v1/resources/")
	if err := fencegate.CheckName(name); err != nil {
		s.problem(w, r, err)
		return
	}
	if err := s.checkRead(callerOf(r), name); err != nil {
		s.problem(w, r, err)
		return
	}
	st, err := s.Gateway.Store().Resource(r.Context(), name)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// unknownReceipt is an UNKNOWN receipt with whether it has passed the deadline
// for automatic reconciliation.
type unknownReceipt struct {
	fencegate.Receipt
	Overdue bool `json:"overdue"`
}

// listUnknown answers GET /v1/unknown (paged: limit, cursor).
func (s *Server) listUnknown(w http.ResponseWriter, r *http.Request) {
	page, err := pageOf(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	all, err := s.Gateway.Store().ReceiptsByState(r.Context(), fencegate.ReceiptUnknown, page)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	out := struct {
		Receipts []unknownReceipt `json:"receipts"`
		Next     string           `json:"next,omitempty"`
	}{Receipts: []unknownReceipt{}, Next: all.Next}
	for _, rc := range s.readableReceipts(callerOf(r), all.Receipts) {
		out.Receipts = append(out.Receipts, unknownReceipt{rc, s.Reconciler != nil && s.Reconciler.IsOverdue(rc)})
	}
	writeJSON(w, http.StatusOK, out)
}

// segmentQuery reads the fence and segment of a one-segment lookup (the
// REST receipts query and the console's), each a canonical decimal.
func segmentQuery(q url.Values) (fence, seg uint64, err error) {
	fence, fok := fencegate.ParseCanonicalUint(q.Get("fence"))
	seg, sok := fencegate.ParseCanonicalUint(q.Get("segment"))
	if !fok || !sok {
		return 0, 0, fencegate.Errorf(fencegate.CodeInvalidRequest, "a segment lookup needs decimal integer fence and segment parameters (no sign or leading zero)")
	}
	return fence, seg, nil
}
