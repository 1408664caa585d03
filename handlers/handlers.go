// Package handlers is Fencegate's HTTP surface (chi): fenced object writes,
// reads, receipts, resource state and the lease registry. It is the only place
// where errors become HTTP answers (application/problem+json with a stable
// code); every route under /v1 requires a workload credential.
package handlers

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/logctx"
	"github.com/fencegate/fencegate/internal/spool"
	"github.com/fencegate/fencegate/openapi"
	"github.com/fencegate/fencegate/registry"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.opentelemetry.io/otel/trace"
)

// Server holds what the handlers need.
type Server struct {
	Gateway *gateway.Gateway
	Stores  map[string]fencegate.ObjectStore
	Auth    Authenticator
	// AdminAuth authenticates operators for /v1/admin and receipt resolution.
	AdminAuth Authenticator
	// GatewayAuth authenticates gateway identities, which may ask the
	// registry to attest any lease's status (nil: none may).
	GatewayAuth Authenticator
	// Admin performs operator actions; nil: no admin routes.
	Admin    Admin
	Registry *registry.Registry // nil: no lease routes
	// Bindings serves the operator's binding routes (with Admin); nil: none.
	Bindings   *gateway.Bindings
	Reconciler *gateway.Reconciler
	APIs       map[string]*httpapi.API // third-party APIs by name
	// MayRead decides whether an authenticated identity may read a resource:
	// its receipts (with stored upstream answers), fence state, objects,
	// quarantine records, and an API's read routes. Lists leave out what it
	// may not read; a direct read of it is FORBIDDEN. nil lets every
	// authenticated workload read.
	MayRead func(identity, resource string) bool
	// MaxBody caps a request body in bytes (default DefaultMaxBody).
	MaxBody int64
	// BodyReadTimeout bounds every wait for more of a request body (0: none).
	BodyReadTimeout time.Duration
	// AnswerWriteTimeout bounds every wait to send more of an answer, once
	// the handler has begun it (0: none).
	AnswerWriteTimeout time.Duration
	// SpoolDir holds request bodies while they are admitted and forwarded.
	SpoolDir string
	// MemoryBody: a body of at most this many bytes is held in memory
	// instead of SpoolDir (0: DefaultMemoryBody; negative: every body is
	// spooled), within MemoryBodies bytes held at once (0:
	// DefaultMemoryBodies); a body that does not fit is spooled.
	MemoryBody, MemoryBodies int64
	// Bodies, if set, is the body pool (and memory budget) to read bodies
	// through, shared with the S3 front door; nil: one made from MemoryBody
	// and MemoryBodies.
	Bodies *spool.Pool

	Log *slog.Logger
	// Ready reports whether the service may take traffic (default: always).
	Ready func() bool
	// QuarantinePayload bounds the refused payload a quarantine record keeps
	// (0: fencegate.DefaultQuarantinePayload; negative: none; at most
	// fencegate.MaxQuarantinePayload); larger ones keep digest and size.
	QuarantinePayload int64
	// S3, when set, serves the requests signed with AWS Signature Version 4
	// on this listener (the S3 front door, package s3door): see isSigV4. The
	// REST API's own requests carry a bearer token or a client certificate.
	S3 http.Handler
	// Now stamps operator resolutions and paces the refusal log (default
	// time.Now).
	Now func() time.Time
	// Refused, if set, is told the code of every problem answer (refusals
	// and failures), including those whose log line was left out.
	Refused func(code fencegate.Code)

	refusals *refusalLog
	bodies   *spool.Pool
	// Observe is told about every answer, for metrics (nil: nothing).
	Observe Observer
	// Tracer makes the request spans (nil: none).
	Tracer trace.TracerProvider

	sessions consoleSessions
	csrf     *http.CrossOriginProtection
}

// DefaultMaxBody is the request body limit unless configured.
const DefaultMaxBody = 5 << 30

// DefaultMemoryBody and DefaultMemoryBodies are the in-memory body bounds
// unless configured.
const (
	DefaultMemoryBody   = 1 << 20
	DefaultMemoryBodies = 64 << 20
)

// Router returns the HTTP handler of s.
func Router(s *Server) http.Handler {
	if s.Log == nil {
		s.Log = slog.Default()
	}
	if s.MaxBody <= 0 {
		s.MaxBody = DefaultMaxBody
	}
	if s.SpoolDir == "" {
		s.SpoolDir = os.TempDir()
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	s.refusals = &refusalLog{}
	if s.MemoryBody == 0 {
		s.MemoryBody = DefaultMemoryBody
	}
	if s.MemoryBodies == 0 {
		s.MemoryBodies = DefaultMemoryBodies
	}
	if s.Bodies == nil {
		s.Bodies = spool.NewPool(s.MemoryBody, s.MemoryBodies)
	}
	s.bodies = s.Bodies
	r := chi.NewRouter()
	// RFC 9110 §9.1: every GET route answers HEAD too (GetHead routes a HEAD
	// without a route of its own to the GET handler; net/http sends no body
	// with a HEAD answer, RFC 9110 §9.3.2). After s3Door: a signed S3 HEAD is
	// the front door's.
	r.Use(s.observeRequests, s.recoverer, s.guardAnswers, s.guardBodies, s.s3Door, middleware.GetHead)
	r.Get("/healthz", s.healthz)
	r.Get("/openapi.yaml", serveSpec)
	s.consoleRoutes(r)
	r.Route("/v1", func(r chi.Router) {
		r.Put("/objects/{store}/*", s.putObject)
		r.Delete("/objects/{store}/*", s.deleteObject)
		r.Get("/objects/{store}/*", s.getObject)
		r.Head("/objects/{store}/*", s.getObject)
		// The query form ?key= of the same routes, for generated clients
		// (objectPath).
		r.Put("/objects/{store}", s.putObject)
		r.Delete("/objects/{store}", s.deleteObject)
		r.Get("/objects/{store}", s.getObject)
		r.Head("/objects/{store}", s.getObject)
		r.With(s.authOnly).Get("/receipts", s.listReceipts)
		r.With(s.authOnly).Get("/receipts/{id}", s.getReceipt)
		r.With(s.authOnly).Get("/resources/*", s.getResource)
		r.With(s.authOnly).Get("/unknown", s.listUnknown)
		s.quarantineRoutes(r)
		s.apiRoutes(r)
		if s.Registry != nil {
			s.leaseRoutes(r)
			s.delegationRoutes(r)
		}
		if s.Admin != nil {
			s.adminRoutes(r)
		}
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.problem(w, r, fencegate.Errorf(fencegate.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	root := r
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		allow := allowedMethods(root, r)
		if allow == "" { // a method chi does not know, on a path no route serves
			s.problem(w, r, fencegate.Errorf(fencegate.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
			return
		}
		w.Header().Set("Allow", allow)
		s.problem(w, r, fencegate.Errorf(fencegate.CodeInvalidRequest, "method %s is not allowed on %s", r.Method, r.URL.Path))
	})
	return r
}

// routedMethods are the methods a route may serve, in the order an Allow
// header lists them.
var routedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods is the Allow header (RFC 9110 §10.2.1) of a request whose
// path is routed but not for its method: the methods routes serves on that
// path, HEAD wherever GET is (middleware.GetHead); "" when none does. The closed set of codes
// has no 405, so the answer stays 400 INVALID_REQUEST; Allow tells the
// caller what the path takes. It is found only on this error path.
func allowedMethods(routes chi.Routes, r *http.Request) string {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	var allowed []string
	get := false
	for _, m := range routedMethods {
		ok := routes.Match(chi.NewRouteContext(), m, path)
		if m == http.MethodGet {
			get = ok
		}
		if ok || m == http.MethodHead && get {
			allowed = append(allowed, m)
		}
	}
	return strings.Join(allowed, ", ")
}

// problem answers err. Every answer is counted and logged by Refusal.
func (s *Server) problem(w http.ResponseWriter, r *http.Request, err error) {
	writeProblem(w, r, func(code fencegate.Code, status int, attrs ...any) {
		caller := callerOf(r)
		if caller == "" && s.Auth != nil && code != fencegate.CodeUnauthenticated {
			caller, _ = s.Auth.Authenticate(r) // fenced routes authenticate in the handler
		}
		s.Refusal(r.Context(), code, status, caller, attrs...)
	}, err)
}

// Refusal notes one problem answer with code and status to caller ("" when
// unknown): it is counted (Refused), every one, and its log line ("request
// refused", or "request failed" for a 5xx, with attrs and the caller) is
// rate-limited per code and caller (see refusallog.go). It is the one place
// answers are counted and logged, for the REST API and for the S3 front door
// (s3door.Server.Refused), which share its metric and its limits.
func (s *Server) Refusal(ctx context.Context, code fencegate.Code, status int, caller string, attrs ...any) {
	if s.Refused != nil {
		s.Refused(code)
	}
	if caller != "" {
		attrs = append(attrs, "caller", caller)
	}
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	s.logProblem(ctx, log, code, status, caller, attrs...)
}

type callerKey struct{}

// authOnly refuses requests without a valid workload credential and puts the
// caller's identity in the context.
func (s *Server) authOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := s.Auth.Authenticate(r)
		if err != nil {
			s.problem(w, r, err)
			return
		}
		logctx.Add(r.Context(), slog.String("caller", id))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, id)))
	})
}

func callerOf(r *http.Request) string {
	id, _ := r.Context().Value(callerKey{}).(string)
	return id
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if s.Ready != nil && !s.Ready() {
		s.problem(w, r, fencegate.Errorf(fencegate.CodeBackendUnavailable, "not ready"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// serveSpec answers the embedded OpenAPI document, the same bytes as
// openapi/openapi.yaml, to anyone (it is the public description of the API).
func serveSpec(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", openapi.MediaType)
	w.Header().Set("Content-Length", strconv.Itoa(len(openapi.Spec)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(openapi.Spec)
	}
}

// recoverer turns a panic into an INTERNAL problem instead of a dropped
// connection; the panic is logged.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.problem(w, r, &fencegate.Error{Code: fencegate.CodeInternal, Message: "internal error", Err: fmt.Errorf("panic: %v", v)})
			}
		}()
		next.ServeHTTP(w, r)
	})
}
