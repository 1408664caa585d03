package handlers

import (
	"io"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/fencegate/fencegate"
)

// quarantinePayload is the largest refused payload a quarantine record keeps
// (Server.QuarantinePayload: 0 means fencegate.DefaultQuarantinePayload, a
// negative value none; at most fencegate.MaxQuarantinePayload); it also bounds the accepted payload
// shown beside it.
func (s *Server) quarantinePayload() int64 {
	switch {
	case s.QuarantinePayload < 0:
		return 0
	case s.QuarantinePayload == 0:
		return fencegate.DefaultQuarantinePayload
	case s.QuarantinePayload > fencegate.MaxQuarantinePayload:
		return fencegate.MaxQuarantinePayload
	}
	return s.QuarantinePayload
}

// listQuarantine answers GET /v1/quarantine[?resource=R] (paged: limit,
// cursor; R must be a canonical name, fencegate.CheckName). Records come without their payloads (payloadKept says whether
// GET /v1/quarantine/{id} has it), so a page stays small.
func (s *Server) listQuarantine(w http.ResponseWriter, r *http.Request) {
	q, page, err := listQuery(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	res := q.Get("resource")
	if res != "" {
		if err := s.checkReadName(callerOf(r), res); err != nil {
			s.problem(w, r, err)
			return
		}
	}
	list, err := s.Gateway.Store().Quarantined(r.Context(), res, page)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	list.Records = s.readableQuarantine(callerOf(r), list.Records)
	for i := range list.Records {
		list.Records[i].Payload = nil
	}
	writeJSON(w, http.StatusOK, list)
}

// quarantineView is one quarantine record beside the receipt that was
// accepted for its segment, each with its payload where the gateway has it.
type quarantineView struct {
	Quarantine fencegate.Quarantine `json:"quarantine"`
	Accepted   fencegate.Receipt    `json:"accepted"`
	// AcceptedPayload is the accepted payload: the upstream request body kept
	// in an API receipt, or the object's content while the object still holds
	// the accepted write (and fits the bound).
	AcceptedPayload []byte `json:"acceptedPayload,omitempty"`
	// AcceptedPayloadKept tells whether AcceptedPayload holds it; when not,
	// AcceptedPayloadNote says why.
	AcceptedPayloadKept bool   `json:"acceptedPayloadKept"`
	AcceptedPayloadNote string `json:"acceptedPayloadNote,omitempty"`
}

// getQuarantine answers GET /v1/quarantine/{id}: the record (with the refused
// payload when kept) and the accepted receipt and payload, side by side.
func (s *Server) getQuarantine(w http.ResponseWriter, r *http.Request) {
	v, err := s.quarantineView(r, chi.URLParam(r, "id"), true)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// quarantineView reads quarantine record id beside its accepted receipt and
// payload; checkRead applies the caller's read policy (the console's admins
// read every resource).
func (s *Server) quarantineView(r *http.Request, id string, checkRead bool) (quarantineView, error) {
	ctx := r.Context()
	q, err := s.Gateway.Store().QuarantineRecord(ctx, id)
	if err == nil && checkRead {
		err = s.checkRead(callerOf(r), q.Resource)
	}
	if err != nil {
		return quarantineView{}, err
	}
	rc, err := s.Gateway.Store().Receipt(ctx, q.ReceiptID)
	if err != nil {
		return quarantineView{}, err
	}
	v := quarantineView{Quarantine: q, Accepted: rc}
	v.AcceptedPayload, v.AcceptedPayloadKept, v.AcceptedPayloadNote = s.acceptedPayload(r, &rc)
	return v, nil
}

// acceptedPayload finds the payload of an accepted receipt, bounded like a
// quarantined one.
func (s *Server) acceptedPayload(r *http.Request, rc *fencegate.Receipt) ([]byte, bool, string) {
	max := s.quarantinePayload()
	if rc.Request != nil {
		if int64(len(rc.Request.Body)) > max {
			return nil, false, "the upstream request body is larger than the quarantine bound"
		}
		return rc.Request.Body, true, ""
	}
	name, key, ok := fencegate.SplitObjectTarget(rc.Target)
	st := s.Stores[name]
	if !ok || st == nil {
		return nil, false, "the receipt kept no request and names no object store"
	}
	if rc.Method != http.MethodPut {
		return nil, false, "the accepted request was a " + rc.Method + " without a body"
	}
	body, info, err := st.Get(r.Context(), key)
	if err != nil {
		return nil, false, "the object cannot be read: " + fencegate.ErrorMessage(err)
	}
	defer body.Close()
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); !ok || m.ReceiptID != rc.ID {
		return nil, false, "the object no longer holds the accepted write"
	}
	if info.Size > max {
		return nil, false, "the object is larger than the quarantine bound"
	}
	b, err := io.ReadAll(io.LimitReader(body, max+1))
	if err != nil || int64(len(b)) > max {
		return nil, false, "the object could not be read whole"
	}
	return b, true, ""
}

// quarantineRoutes mounts the quarantine list and records.
func (s *Server) quarantineRoutes(r chi.Router) {
	r.With(s.authOnly).Get("/quarantine", s.listQuarantine)
	r.With(s.authOnly).Get("/quarantine/{id}", s.getQuarantine)
}
