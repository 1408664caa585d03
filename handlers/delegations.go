package handlers

import (
	"net/http"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
	"github.com/go-chi/chi/v5"
)

// delegationRoutes are the registry's delegation routes: the owner mints
// and revokes, the delegate (or a gateway in query mode) asks for status.
func (s *Server) delegationRoutes(r chi.Router) {
	r.With(s.authOnly).Post("/leases/{lease}/delegations", s.mintDelegation)
	r.With(s.authOnly).Delete("/delegations/{delegation}", s.revokeDelegation)
	r.With(s.gatewayOrWorkload).Post("/delegations/{delegation}/status", s.delegationStatus)
}

func (s *Server) mintDelegation(w http.ResponseWriter, r *http.Request) {
	var b fencegate.DelegationRequest
	if err := decodeJSON(r, &b, "delegate"); err != nil {
		s.problem(w, r, err)
		return
	}
	dl, err := s.Registry.Delegate(r.Context(), callerOf(r), chi.URLParam(r, "lease"), registry.DelegateParams{
		Delegate: b.Delegate, GrantDigest: b.GrantDigest, SegmentFrom: b.SegmentFrom, SegmentTo: b.SegmentTo,
		Segments: b.Segments, TargetPrefix: b.TargetPrefix,
	})
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, fencegate.DelegationAnswer{ID: dl.Delegation.ID, Delegation: dl.Token, Claims: dl.Delegation})
}

func (s *Server) revokeDelegation(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "delegation")
	if err := s.Registry.RevokeDelegation(r.Context(), callerOf(r), id); err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "revoked": true})
}

// delegationStatus answers a status proof for the delegation's grant to its
// delegate, or to a gateway identity (query mode across processes).
func (s *Server) delegationStatus(w http.ResponseWriter, r *http.Request) {
	var b fencegate.DelegationStatusRequest
	if err := decodeJSON(r, &b, "grantDigest"); err != nil {
		s.problem(w, r, err)
		return
	}
	req := registry.DelegationStatusRequest{ID: chi.URLParam(r, "delegation"), GrantDigest: b.GrantDigest, Caller: callerOf(r)}
	if gw, _ := r.Context().Value(gatewayKey{}).(bool); gw {
		req.Caller = ""
	}
	tok, st, err := s.Registry.DelegationStatus(r.Context(), req)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fencegate.DelegationStatusAnswer{StatusProof: tok, State: st.State,
		StatusExpiresAt: time.UnixMilli(st.ExpiresAtMs).UTC()})
}
