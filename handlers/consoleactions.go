package handlers

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// The console's actions. Each is a POST (same-origin, see consoleSameOrigin)
// that goes through the same path as its REST route, and is answered with a
// redirect to the page that shows the result.

// consoleForm reads a bounded urlencoded form, the one place the console
// reads one. A field given more than once (breakGlass=yes&breakGlass=no) is
// INVALID_REQUEST before anything is done: reading only its first value
// would make the form ambiguous, as the JSON admin routes refuse a
// duplicate member and strictQuery a repeated query parameter.
func consoleForm(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "form unreadable: %v", err)
	}
	return oneValueEach("form field", r.PostForm)
}

// consoleResolve settles an UNKNOWN receipt by hand in two steps: the first
// POST (no confirm) shows what will be recorded and asks again; the second
// (confirm=yes) resolves through the REST route's path (Server.resolve, which
// logs the audit line) and redirects to the receipt.
func (s *Server) consoleResolve(w http.ResponseWriter, r *http.Request) {
	if err := consoleForm(w, r); err != nil {
		s.consoleError(w, r, err)
		return
	}
	id := chi.URLParam(r, "receiptId")
	in := resolution{State: fencegate.ReceiptState(r.PostForm.Get("state")), Note: strings.TrimSpace(r.PostForm.Get("note"))}
	if in.State != fencegate.ReceiptCommitted && in.State != fencegate.ReceiptNotApplied {
		s.consoleError(w, r, fencegate.Errorf(fencegate.CodeInvalidRequest, "choose COMMITTED or NOT_APPLIED"))
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		rc, err := s.Gateway.Store().Receipt(r.Context(), id)
		if err != nil {
			s.consoleError(w, r, err)
			return
		}
		s.render(w, r, http.StatusOK, "confirm", map[string]any{"R": rc, "Row": s.unknownRow(rc), "State": in.State, "Note": in.Note})
		return
	}
	if _, err := s.resolve(r.Context(), callerOf(r), id, in); err != nil {
		s.consoleError(w, r, err)
		return
	}
	s.flash(r, "resolved "+id)
	http.Redirect(w, r, "/console/receipt?"+url.Values{"id": {id}}.Encode(), http.StatusSeeOther)
}

// consoleSetMode sets a pattern's enforcement mode through the admin path
// (Admin.SetMode): enforce -> shadow is refused unless the break-glass box
// is ticked, exactly as PUT /v1/admin/modes without breakGlass.
func (s *Server) consoleSetMode(w http.ResponseWriter, r *http.Request) {
	if err := consoleForm(w, r); err != nil {
		s.consoleError(w, r, err)
		return
	}
	if s.Admin == nil {
		s.consoleError(w, r, fencegate.Errorf(fencegate.CodeNotFound, "this gateway has no operator state"))
		return
	}
	rule := gateway.ModeRule{Pattern: strings.TrimSpace(r.PostForm.Get("pattern")), Mode: gateway.Mode(r.PostForm.Get("mode"))}
	breakGlass := r.PostForm.Get("breakGlass") == "yes"
	if _, err := s.Admin.SetMode(r.Context(), rule, breakGlass); err != nil {
		s.consoleError(w, r, err)
		return
	}
	s.logModeChange(r, rule, breakGlass)
	s.flash(r, "mode "+rule.Pattern+" "+string(rule.Mode))
	http.Redirect(w, r, "/console/modes", http.StatusSeeOther)
}
