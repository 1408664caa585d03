package handlers

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/go-chi/chi/v5"
)

// receiptList is the JSON shape of every list of receipts.
type receiptList struct {
	Receipts []fencegate.Receipt `json:"receipts"`
}

// listReceipts answers GET /v1/receipts?operationId=... or
// ?resource=...&fence=...&segment=....
func (s *Server) listReceipts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx := r.Context()
	var (
		list []fencegate.Receipt
		err  error
	)
	switch {
	case q.Get("operationId") != "":
		list, err = s.Gateway.Store().ReceiptsByOperation(ctx, q.Get("operationId"))
	case q.Get("resource") != "":
		if err = s.checkRead(callerOf(r), q.Get("resource")); err != nil {
			break
		}
		fence, ferr := strconv.ParseUint(q.Get("fence"), 10, 64)
		seg, serr := strconv.ParseUint(q.Get("segment"), 10, 64)
		if ferr != nil || serr != nil {
			err = fencegate.Errorf(fencegate.CodeInvalidRequest, "resource queries need integer fence and segment parameters")
			break
		}
		var rc fencegate.Receipt
		rc, err = s.Gateway.Store().ReceiptAt(ctx, q.Get("resource"), fence, seg)
		if fencegate.ErrorCode(err) == fencegate.CodeNotFound {
			err = nil
		} else if err == nil {
			list = append(list, rc)
		}
	default:
		err = fencegate.Errorf(fencegate.CodeInvalidRequest, "give operationId, or resource with fence and segment")
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, receiptList{s.readableReceipts(callerOf(r), list)})
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

func (s *Server) listUnknown(w http.ResponseWriter, r *http.Request) {
	all, err := s.Gateway.Store().ReceiptsByState(r.Context(), fencegate.ReceiptUnknown, 1000)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	out := struct {
		Receipts []unknownReceipt `json:"receipts"`
	}{Receipts: []unknownReceipt{}}
	for _, rc := range s.readableReceipts(callerOf(r), all) {
		out.Receipts = append(out.Receipts, unknownReceipt{rc, s.Reconciler != nil && s.Reconciler.IsOverdue(rc)})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) listQuarantine(w http.ResponseWriter, r *http.Request) {
	res := r.URL.Query().Get("resource")
	if res != "" {
		if err := s.checkRead(callerOf(r), res); err != nil {
			s.problem(w, r, err)
			return
		}
	}
	list, err := s.Gateway.Store().Quarantined(r.Context(), res)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Quarantine []fencegate.Quarantine `json:"quarantine"`
	}{s.readableQuarantine(callerOf(r), list)})
}
