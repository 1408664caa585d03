package handlers

import (
	"net/http"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry"
	"github.com/go-chi/chi/v5"
)

// MaxLeaseWait caps a long-polling acquisition.
const MaxLeaseWait = 60 * time.Second

func answerOf(l fencegate.Lease) fencegate.LeaseAnswer {
	return fencegate.LeaseAnswer{
		Lease: l.ID, Resource: l.Resource, Owner: l.Owner, RequestID: l.RequestID, FenceToken: l.FenceToken,
		OperationID: l.OperationID, OperationRoot: l.OperationRoot, OperationCategory: l.OperationCategory,
		State: l.State, ExpiresAt: l.ExpiresAt,
	}
}

func issuedAnswer(is registry.Issued) fencegate.LeaseAnswer {
	a := answerOf(is.Lease)
	a.Grant, a.GrantDigest, a.StatusProof = is.Grant, is.GrantDigest, is.StatusProof
	if !is.StatusExpiresAt.IsZero() {
		t := is.StatusExpiresAt
		a.StatusExpiresAt = &t
	}
	return a
}

func (s *Server) leaseRoutes(r chi.Router) {
	r.With(s.authOnly).Post("/leases", s.acquire)
	r.With(s.authOnly).Post("/leases/{lease}/renew", s.renew)
	r.With(s.authOnly).Delete("/leases/{lease}", s.release)
	r.With(s.authOnly).Get("/leases/{lease}", s.leaseStatus)
	r.With(s.authOnly).Post("/leases/{lease}/attest", s.attest)
}

// attestBody names the verified grant a gateway in query mode asks about.
type attestBody struct {
	GrantDigest string `json:"grantDigest"`
	Resource    string `json:"resource"`
	Owner       string `json:"owner"`
	FenceToken  uint64 `json:"fenceToken"`
	IssuerEpoch uint64 `json:"issuerEpoch"`
}

// attest answers a gateway's linearizable status query with a signed status
// proof bound to the grant digest it names.
func (s *Server) attest(w http.ResponseWriter, r *http.Request) {
	var b attestBody
	if err := decodeJSON(r, &b); err != nil {
		s.problem(w, r, err)
		return
	}
	g := fencegate.VerifiedGrant{Digest: b.GrantDigest, Grant: fencegate.Grant{Lease: chi.URLParam(r, "lease"),
		Resource: b.Resource, Owner: b.Owner, FenceToken: b.FenceToken, IssuerEpoch: b.IssuerEpoch}}
	tok, err := s.Registry.AttestStatus(r.Context(), g)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"statusProof": tok})
}

func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	var b fencegate.LeaseRequest
	if err := decodeJSON(r, &b); err != nil {
		s.problem(w, r, err)
		return
	}
	if b.WaitMs < 0 {
		s.problem(w, r, fencegate.Errorf(fencegate.CodeInvalidRequest, "waitMs must not be negative"))
		return
	}
	is, err := s.Registry.AcquireWait(r.Context(), callerOf(r), registry.AcquireParams{
		Resource: b.Resource, RequestID: b.RequestID, TTL: time.Duration(b.TTLMs) * time.Millisecond,
		OperationID: b.OperationID, OperationRoot: b.OperationRoot, OperationCategory: b.OperationCategory,
	}, min(time.Duration(b.WaitMs)*time.Millisecond, MaxLeaseWait))
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, issuedAnswer(is))
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	var b fencegate.RenewRequest
	if err := decodeJSON(r, &b); err != nil {
		s.problem(w, r, err)
		return
	}
	is, err := s.Registry.Renew(r.Context(), callerOf(r), chi.URLParam(r, "lease"), time.Duration(b.TTLMs)*time.Millisecond)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, issuedAnswer(is))
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	l, err := s.Registry.Release(r.Context(), callerOf(r), chi.URLParam(r, "lease"))
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, answerOf(l))
}

func (s *Server) leaseStatus(w http.ResponseWriter, r *http.Request) {
	is, err := s.Registry.Status(r.Context(), chi.URLParam(r, "lease"))
	if err == nil && is.Lease.Owner != callerOf(r) {
		err = fencegate.Errorf(fencegate.CodeOwnerMismatch, "lease %s is not the caller's", is.Lease.ID)
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, issuedAnswer(is))
}
