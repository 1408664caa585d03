package handlers

import (
	"context"
	"math"
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
	r.With(s.gatewayOrWorkload).Post("/leases/{lease}/attest", s.attest)
	r.With(s.gatewayOnly).Post("/leases/{lease}/s3-resolve", s.resolveS3)
	if s.Admin != nil {
		r.With(s.gatewayOnly).Get("/trust-bundle", s.registryBundle)
		r.With(s.gatewayOnly).Get("/trust-bundle/chain", s.registryBundleChain)
	}
}

type gatewayKey struct{}

// gatewayOrWorkload admits an authenticated gateway identity (marked in the
// context) or, failing that, a workload, as authOnly does.
func (s *Server) gatewayOrWorkload(next http.Handler) http.Handler {
	workload := s.authOnly(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.GatewayAuth != nil {
			if id, err := s.GatewayAuth.Authenticate(r); err == nil {
				ctx := context.WithValue(context.WithValue(r.Context(), callerKey{}, "gateway:"+id), gatewayKey{}, true)
				next.ServeHTTP(w, r.WithContext(ctx))
				return
			}
		}
		workload.ServeHTTP(w, r)
	})
}

// gatewayOnly admits authenticated gateway identities only; a workload
// credential is FORBIDDEN.
func (s *Server) gatewayOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error = fencegate.Errorf(fencegate.CodeUnauthenticated, "a gateway credential is required")
		if s.GatewayAuth != nil {
			var id string
			if id, err = s.GatewayAuth.Authenticate(r); err == nil {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, "gateway:"+id)))
				return
			}
		}
		if _, werr := s.Auth.Authenticate(r); werr == nil {
			err = fencegate.Errorf(fencegate.CodeForbidden, "this route is for gateway identities")
		}
		s.problem(w, r, err)
	})
}

// registryBundle answers the registry's trust bundle to a gateway replica,
// which installs it only if newer, not lifting a revocation and signed (the
// Fence-Bundle-Signature header) by a key of the bundle in force there.
func (s *Server) registryBundle(w http.ResponseWriter, r *http.Request) {
	b, sig, err := s.Admin.SignedTrustBundle(r.Context())
	if err != nil {
		s.problem(w, r, err)
		return
	}
	if sig != "" {
		w.Header().Set(fencegate.BundleSignatureHeader, sig)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// registryBundleChain answers GET /v1/trust-bundle/chain?after=V to a
// gateway replica: the bundles published after V, each with its signature,
// which the replica installs one by one, each verified under the one
// before; NOT_FOUND when none is kept from V, as from a registry older
// than the route.
func (s *Server) registryBundleChain(w http.ResponseWriter, r *http.Request) {
	q, err := strictQuery(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	raw := q.Get("after")
	after, ok := fencegate.ParseCanonicalUint(raw)
	if !ok {
		s.problem(w, r, fencegate.Errorf(fencegate.CodeInvalidRequest, "query parameter after must be a bundle version (a decimal integer in 0..2^64-1, no sign or leading zero), not %q", raw))
		return
	}
	chain, err := s.Admin.TrustBundleChain(r.Context(), after)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, chain)
}

// attest answers a linearizable status query with a signed status proof for
// the lease's own grant that the digest names. Only the lease's owner or a
// gateway identity is answered; the registry decides the grant's epoch.
func (s *Server) attest(w http.ResponseWriter, r *http.Request) {
	var b fencegate.AttestBody
	if err := decodeJSON(r, &b, "grantDigest"); err != nil { // the others, when sent, must match the grant
		s.problem(w, r, err)
		return
	}
	req := registry.AttestRequest{Lease: chi.URLParam(r, "lease"), GrantDigest: b.GrantDigest, Resource: b.Resource,
		Owner: b.Owner, FenceToken: b.FenceToken, IssuerEpoch: b.IssuerEpoch, Caller: callerOf(r)}
	if gw, _ := r.Context().Value(gatewayKey{}).(bool); gw {
		req.Caller = ""
	}
	tok, err := s.Registry.AttestStatus(r.Context(), req)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fencegate.AttestAnswer{StatusProof: tok})
}

func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	var b fencegate.LeaseRequest
	if err := decodeJSON(r, &b, "resource", "requestId", "operationId", "ttlMs"); err != nil {
		s.problem(w, r, err)
		return
	}
	if b.WaitMs < 0 {
		s.problem(w, r, fencegate.Errorf(fencegate.CodeInvalidRequest, "waitMs must not be negative"))
		return
	}
	if b.S3Credentials && !s.Registry.IssuesS3() { // refused before anything is acquired
		s.problem(w, r, fencegate.Errorf(fencegate.CodeUnsupported, "this registry issues no S3 credentials"))
		return
	}
	ttl, err := millis(b.TTLMs, "ttlMs")
	if err != nil {
		s.problem(w, r, err)
		return
	}
	is, err := s.Registry.AcquireWait(r.Context(), callerOf(r), registry.AcquireParams{
		Resource: b.Resource, RequestID: b.RequestID, TTL: ttl,
		OperationID: b.OperationID, OperationRoot: b.OperationRoot, OperationCategory: b.OperationCategory,
	}, time.Duration(min(b.WaitMs, MaxLeaseWait.Milliseconds()))*time.Millisecond)
	var a fencegate.LeaseAnswer
	if err == nil {
		a, err = s.withS3(issuedAnswer(is), is, b.S3Credentials)
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, a)
}

func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	var b fencegate.RenewRequest
	if err := decodeJSON(r, &b, "ttlMs"); err != nil {
		s.problem(w, r, err)
		return
	}
	if b.S3Credentials && !s.Registry.IssuesS3() { // refused before the lease is renewed, as acquire is
		s.problem(w, r, fencegate.Errorf(fencegate.CodeUnsupported, "this registry issues no S3 credentials"))
		return
	}
	ttl, err := millis(b.TTLMs, "ttlMs")
	if err != nil {
		s.problem(w, r, err)
		return
	}
	is, err := s.Registry.Renew(r.Context(), callerOf(r), chi.URLParam(r, "lease"), ttl)
	var a fencegate.LeaseAnswer
	if err == nil {
		a, err = s.withS3(issuedAnswer(is), is, b.S3Credentials)
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
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
	asked, qerr := s3Asked(r)
	if err == nil {
		err = qerr
	}
	var a fencegate.LeaseAnswer
	if err == nil {
		a, err = s.withS3(issuedAnswer(is), is, asked)
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// withS3 adds the lease's S3 credentials to a, when asked for. They are
// answered only to the lease's owner, like its grant.
func (s *Server) withS3(a fencegate.LeaseAnswer, is registry.Issued, asked bool) (fencegate.LeaseAnswer, error) {
	if !asked {
		return a, nil
	}
	c, err := s.Registry.S3Credentials(is)
	if err != nil {
		return a, err
	}
	a.S3Credentials = &c
	return a, nil
}

// s3Asked reads ?s3Credentials=true|false, from a query parsed strictly
// (strictQuery: given twice, or unparseable, is INVALID_REQUEST).
func s3Asked(r *http.Request) (bool, error) {
	q, err := strictQuery(r)
	if err != nil {
		return false, err
	}
	switch v := q.Get("s3Credentials"); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, fencegate.Errorf(fencegate.CodeInvalidRequest, "s3Credentials must be true or false, not %.20q", v)
	}
}

// resolveS3 answers a gateway identity what it checks a request signed with
// a lease's S3 credentials against (registry.ResolveS3). The answer holds the
// credentials' secret: it is never cached.
func (s *Server) resolveS3(w http.ResponseWriter, r *http.Request) {
	res, err := s.Registry.ResolveS3(r.Context(), chi.URLParam(r, "lease"))
	if err != nil {
		s.problem(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, fencegate.S3Resolution{State: res.State, Grant: res.Grant, StatusProof: res.StatusProof,
		SecretAccessKey: res.Secret})
}

// millis is ms milliseconds as a Duration, INVALID_REQUEST when it does not
// fit one (about 292 years): multiplied as it is, such a value wrapped into
// an ordinary TTL (2^58+30000 ms read as 30 s) that the registry's bounds
// then took.
func millis(ms int64, field string) (time.Duration, error) {
	if ms > math.MaxInt64/int64(time.Millisecond) || ms < math.MinInt64/int64(time.Millisecond) {
		return 0, fencegate.Errorf(fencegate.CodeInvalidRequest, "%s %d is out of range", field, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}
