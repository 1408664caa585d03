package handlers

import (
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/fencegate/fencegate"
)

// bindingRoutes mounts, under the admin router, the operator's view of an
// object key's binding to the resource that first wrote it:
// GET /v1/admin/bindings/{store}/{key...} (or {store}?key={key}) and DELETE
// to clear it.
func (s *Server) bindingRoutes(r chi.Router) {
	if s.Bindings == nil {
		return
	}
	r.Get("/bindings/{store}/*", s.getBinding)
	r.Delete("/bindings/{store}/*", s.clearBinding)
	r.Get("/bindings/{store}", s.getBinding) // ?key= (see queryKey)
	r.Delete("/bindings/{store}", s.clearBinding)
}

// bindingKey is the canonical store and key of a binding path.
func bindingKey(r *http.Request) (store, key string, err error) {
	if err := noEncodedSlashes(r, "object keys"); err != nil {
		return "", "", err
	}
	rest, _ := strings.CutPrefix(r.URL.Path, "/v1/admin/bindings/")
	store, key, nested := strings.Cut(rest, "/")
	key, err = queryKey(r, key, nested)
	if err != nil {
		return "", "", err
	}
	if store == "" || key == "" {
		return "", "", fencegate.Errorf(fencegate.CodeInvalidRequest, "binding path must be /v1/admin/bindings/{store}/{key} or /v1/admin/bindings/{store}?key={key}")
	}
	if err := fencegate.CheckName(store + "/" + key); err != nil {
		return "", "", err
	}
	return store, key, nil
}

func (s *Server) getBinding(w http.ResponseWriter, r *http.Request) {
	store, key, err := bindingKey(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	b, err := s.Bindings.Get(r.Context(), store, key)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) clearBinding(w http.ResponseWriter, r *http.Request) {
	store, key, err := bindingKey(r)
	if err == nil {
		err = noBody(r)
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	b, err := s.Bindings.Clear(r.Context(), store, key, callerOf(r))
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}
