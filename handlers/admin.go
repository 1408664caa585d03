package handlers

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs"
)

// AdminState is what the admin routes answer: the operator state in force,
// owned by package authority.
type AdminState = authority.State

// Admin performs operator actions (implemented by *authority.Authority, the
// one owner of operator state). Each is a controlled path: trust, epochs and
// policy never change because a token says so.
type Admin interface {
	State(ctx context.Context) (AdminState, error)
	// RetireEpoch revokes an issuer epoch (rotating first if it is the current one).
	RetireEpoch(ctx context.Context, epoch uint64) (AdminState, error)
	RotateKey(ctx context.Context) (AdminState, error)
	SetFloor(ctx context.Context, floor uint64) (AdminState, error)
	BumpPolicy(ctx context.Context) (AdminState, error)
	TrustBundle(ctx context.Context) ([]byte, error)
	// SignedTrustBundle is the bundle document as served to replicas and
	// its signature over exactly those bytes ("" from a registry that does
	// not sign).
	SignedTrustBundle(ctx context.Context) (bundle []byte, signature string, err error)
	// TrustBundleChain is the bundles published after a version, oldest
	// first, or NOT_FOUND when no unbroken chain from there is kept.
	TrustBundleChain(ctx context.Context, after uint64) (fencegate.BundleChain, error)
	SetTrustBundle(ctx context.Context, bundle []byte) (AdminState, error)
	// SetMode sets a pattern's enforcement mode; enforce -> shadow needs breakGlass.
	SetMode(ctx context.Context, rule gateway.ModeRule, breakGlass bool) (AdminState, error)
}

// adminOnly refuses callers without an admin credential. Workload
// credentials are not admin credentials.
func (s *Server) adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.AdminAuth == nil {
			s.problem(w, r, fencegate.Errorf(fencegate.CodeForbidden, "no admin credentials are configured"))
			return
		}
		id, err := s.AdminAuth.Authenticate(r)
		if err != nil {
			if _, werr := s.Auth.Authenticate(r); werr == nil {
				err = fencegate.Errorf(fencegate.CodeForbidden, "this operation needs an admin credential")
			}
			s.problem(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, "admin:"+id)))
	})
}

func (s *Server) adminRoutes(r chi.Router) {
	r.Route("/admin", func(r chi.Router) {
		// adminOnly on each route, not the subrouter: a path no route
		// matches is NOT_FOUND, not an authentication problem.
		r = r.With(s.adminOnly)
		r.Get("/state", s.adminAction(func(r *http.Request) (AdminState, error) { return s.Admin.State(r.Context()) }))
		r.Post("/epochs/{epoch}/revoke", s.adminAction(func(r *http.Request) (AdminState, error) {
			e, ok := fencegate.ParseCanonicalUint(chi.URLParam(r, "epoch"))
			if !ok {
				return AdminState{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "epoch must be a decimal integer without sign or leading zero, not %.40q", chi.URLParam(r, "epoch"))
			}
			if err := noBody(r); err != nil {
				return AdminState{}, err
			}
			return s.Admin.RetireEpoch(r.Context(), e)
		}))
		r.Post("/keys/rotate", s.adminAction(func(r *http.Request) (AdminState, error) {
			if err := noBody(r); err != nil {
				return AdminState{}, err
			}
			return s.Admin.RotateKey(r.Context())
		}))
		r.Post("/floor", s.adminAction(func(r *http.Request) (AdminState, error) {
			var b struct {
				Floor uint64 `json:"floor"`
			}
			if err := decodeJSON(r, &b, "floor"); err != nil {
				return AdminState{}, err
			}
			return s.Admin.SetFloor(r.Context(), b.Floor)
		}))
		r.Get("/modes", s.listModes)
		r.Put("/modes", s.adminAction(func(r *http.Request) (AdminState, error) {
			var b struct {
				Pattern    string       `json:"pattern"`
				Mode       gateway.Mode `json:"mode"`
				BreakGlass bool         `json:"breakGlass"`
			}
			if err := decodeJSON(r, &b, "pattern", "mode"); err != nil {
				return AdminState{}, err
			}
			rule := gateway.ModeRule{Pattern: b.Pattern, Mode: b.Mode}
			st, err := s.Admin.SetMode(r.Context(), rule, b.BreakGlass)
			if err == nil {
				s.logModeChange(r, rule, b.BreakGlass)
			}
			return st, err
		}))
		r.Post("/policy/bump", s.adminAction(func(r *http.Request) (AdminState, error) {
			if err := noBody(r); err != nil {
				return AdminState{}, err
			}
			return s.Admin.BumpPolicy(r.Context())
		}))
		r.Put("/trust-bundle", s.adminAction(func(r *http.Request) (AdminState, error) {
			b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, proofs.MaxBundleSize))
			if err != nil {
				return AdminState{}, fencegate.Wrap(err, fencegate.CodeInvalidRequest,
					fmt.Sprintf("trust bundle body larger than %d bytes (proofs.MaxBundleSize) or unreadable", proofs.MaxBundleSize))
			}
			return s.Admin.SetTrustBundle(r.Context(), b)
		}))
		r.Get("/trust-bundle", func(w http.ResponseWriter, r *http.Request) {
			b, err := s.Admin.TrustBundle(r.Context())
			if err != nil {
				s.problem(w, r, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
		})
		s.bindingRoutes(r)
	})
}

// logModeChange records an operator's mode change (admin API or console):
// who, the pattern, the mode and whether break-glass was used.
func (s *Server) logModeChange(r *http.Request, rule gateway.ModeRule, breakGlass bool) {
	s.Log.Info("mode changed", "caller", callerOf(r), "path", r.URL.Path,
		"pattern", rule.Pattern, "mode", rule.Mode, "breakGlass", breakGlass)
}

// noBody refuses (INVALID_REQUEST) a request body on an operator route
// that takes none (revoke an epoch, rotate the key, bump the policy, clear
// a binding): an action that ignored one would act on a request its sender
// may have meant otherwise (`{"epoch":1}` to rotate). An empty body, sent
// with Content-Length: 0 or chunked with no data, is no body.
func noBody(r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	if r.ContentLength > 0 {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "%s %s takes no request body (got %d bytes)", r.Method, r.URL.Path, r.ContentLength)
	}
	var b [1]byte
	switch n, err := io.ReadFull(r.Body, b[:]); {
	case n > 0:
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "%s %s takes no request body", r.Method, r.URL.Path)
	case err != nil && err != io.EOF:
		return fencegate.Wrap(err, fencegate.CodeInvalidRequest, "request body unreadable")
	}
	return nil
}

// adminAction answers an admin operation with the resulting state.
func (s *Server) adminAction(f func(r *http.Request) (AdminState, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st, err := f(r)
		if err != nil {
			s.problem(w, r, err)
			return
		}
		s.Log.Info("admin action", "caller", callerOf(r), "method", r.Method, "path", r.URL.Path)
		writeJSON(w, http.StatusOK, st)
	}
}
