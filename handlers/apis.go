package handlers

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/go-chi/chi/v5"
)

// apiRoutes mounts the fenced third-party API calls
// (POST|PUT|PATCH|DELETE /v1/apis/{api}/{path...}), the unfenced reads of
// declared GET routes, and the operator's resolve endpoint for UNKNOWN receipts.
func (s *Server) apiRoutes(r chi.Router) {
	for _, m := range fencegate.FencedAPIMethods() {
		r.Method(m, "/apis/{api}/*", http.HandlerFunc(s.callAPI))
		r.Method(m, "/apis/{api}", http.HandlerFunc(s.callAPI)) // ?path= (apiCallPath)
	}
	r.Get("/apis/{api}/*", s.readAPI)
	r.Get("/apis/{api}", s.readAPI)
	r.With(s.adminOnly).Post("/unknown/{receiptId}/resolve", s.resolveUnknown)
}

// apiCallPath splits /v1/apis/{api}/{path...}, or the query form
// /v1/apis/{api}?path={path} (for generated clients, which escape a path
// parameter's slashes), into the API and the upstream path (with its leading
// slash). Encoded slashes in the path are refused, and so are query strings
// on writes beyond the query form's one `path`: the payload digest covers
// only the body, so nothing else may vary the call. The query form's value
// is decoded exactly once; api.Match then checks it as it checks a path.
func apiCallPath(r *http.Request) (api, path string, err error) {
	if err := noEncodedSlashes(r, "API paths"); err != nil {
		return "", "", err
	}
	rest, _ := strings.CutPrefix(r.URL.Path, "/v1/apis/")
	api, path, nested := strings.Cut(rest, "/")
	if !nested {
		q, err := parseQuery(r)
		if err != nil {
			return "", "", err
		}
		if paths := q["path"]; len(paths) != 1 {
			return "", "", fencegate.Errorf(fencegate.CodeInvalidRequest, "API path must be /v1/apis/{api}/{path} or /v1/apis/{api}?path={path}")
		} else if path = strings.TrimPrefix(paths[0], "/"); len(q) != 1 && r.Method != http.MethodGet {
			return "", "", fencegate.Errorf(fencegate.CodeInvalidRequest, "query strings are not forwarded to APIs; put parameters in the body")
		}
	} else if r.URL.RawQuery != "" && r.Method != http.MethodGet {
		return "", "", fencegate.Errorf(fencegate.CodeInvalidRequest, "query strings are not forwarded to APIs; put parameters in the body")
	}
	if api == "" || path == "" {
		return "", "", fencegate.Errorf(fencegate.CodeInvalidRequest, "API path must be /v1/apis/{api}/{path} or /v1/apis/{api}?path={path}")
	}
	return api, "/" + path, nil
}

// upstreamQuery is the query string a read forwards: the request's, less the
// query form's `path` (re-encoded, keys sorted, when that form is used).
func upstreamQuery(r *http.Request) string {
	rest, _ := strings.CutPrefix(r.URL.Path, "/v1/apis/")
	if strings.Contains(rest, "/") {
		return r.URL.RawQuery
	}
	q, _ := url.ParseQuery(r.URL.RawQuery) // apiCallPath parsed it
	q.Del("path")
	return q.Encode()
}

// apiTarget is the start both API routes share (fenced calls and reads):
// authenticate the workload, split the path into the API and its upstream
// path, and find the configured API. Each route then matches its own method.
func (s *Server) apiTarget(r *http.Request) (caller, name, path string, api *httpapi.API, err error) {
	if caller, err = s.Auth.Authenticate(r); err != nil {
		return "", "", "", nil, err
	}
	if name, path, err = apiCallPath(r); err != nil {
		return "", "", "", nil, err
	}
	if api = s.APIs[name]; api == nil {
		return "", "", "", nil, fencegate.Errorf(fencegate.CodeNotFound, "no API named %q is configured", name)
	}
	return caller, name, path, api, nil
}

// callAPI forwards one fenced call: authenticate, find the declared route and
// derive its resource, verify the grant before reading the body, spool the
// body within the API's limit, then admit and forward through the gateway.
func (s *Server) callAPI(w http.ResponseWriter, r *http.Request) {
	caller, name, path, api, err := s.apiTarget(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	target, resource, ok := api.MatchCall(r.Method, path, r.Header)
	if !ok {
		s.problem(w, r, fencegate.Errorf(fencegate.CodeNotFound, "api %q declares no route %s %s", name, r.Method, path))
		return
	}
	req, err := fenceRequest(r, caller)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	req.Resource = resource
	if err := s.preauthorize(r, &req); err != nil {
		s.problem(w, r, err)
		return
	}
	limit := min(s.MaxBody, api.MaxBodyBytes())
	if r.ContentLength > limit {
		s.problem(w, r, fencegate.Errorf(fencegate.CodeInvalidRequest, "request body exceeds the limit of %d bytes", limit))
		return
	}
	body, err := s.spool(r, limit)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	defer body.Close()
	req.Target = target
	req.PayloadDigest = body.Digest()
	req.PayloadSize, req.QuarantinePayload = body.Size, body.Keep(s.quarantinePayload())
	call := api.Call(r.Method, path, r.Header, body.Reader(), body.Size)
	if req.DelegationToken != "" { // Apply verifies the caller is the delegation's delegate before the call is kept
		call = call.AsDelegate(caller)
	}
	req.Effect = call
	res, err := s.Gateway.Apply(r.Context(), req)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	h := w.Header()
	markShadow(w, res)
	er := res.Receipt.Response
	if er == nil { // settled by an operator without an upstream answer
		h.Set("Fence-Receipt", res.Receipt.ID)
		if res.Replay {
			h.Set("Fence-Replay", "true")
		}
		writeJSON(w, http.StatusOK, res.Receipt)
		return
	}
	for k, v := range er.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Content-Length", "Transfer-Encoding", "Connection":
			continue
		}
		passHeader(h, k, v)
	}
	notAPage(h)
	h.Set("Fence-Receipt", res.Receipt.ID)
	if res.Replay {
		h.Set("Fence-Replay", "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(er.Body)))
	w.WriteHeader(er.Status)
	_, _ = w.Write(er.Body)
}

// resolution is an operator's verdict on an UNKNOWN receipt.
type resolution struct {
	State fencegate.ReceiptState `json:"state"`
	Note  string                 `json:"note"`
}

// resolveUnknown settles an UNKNOWN receipt by hand: COMMITTED or NOT_APPLIED
// (which gives the segment number back). Only UNKNOWN receipts that await a
// person (gateway.Reconciler.AwaitsPerson: overdue, or given up by their
// strategy) are accepted; one the reconciler is still settling is
// STILL_RECONCILING (409) and nothing changes, so a verdict by hand never
// contradicts a resend that pays. The note and the operator's identity are
// kept in the receipt.
func (s *Server) resolveUnknown(w http.ResponseWriter, r *http.Request) {
	var in resolution
	if err := decodeJSON(r, &in, "state"); err != nil {
		s.problem(w, r, err)
		return
	}
	out, err := s.resolve(r.Context(), callerOf(r), chi.URLParam(r, "receiptId"), in)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// resolve is the one path of a manual resolution (the REST route and the
// console): it checks the verdict and the receipt as resolveUnknown says,
// settles it, and logs the audit line.
func (s *Server) resolve(ctx context.Context, caller, id string, in resolution) (fencegate.Receipt, error) {
	if in.State != fencegate.ReceiptCommitted && in.State != fencegate.ReceiptNotApplied {
		return fencegate.Receipt{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "state must be COMMITTED or NOT_APPLIED")
	}
	rc, err := s.Gateway.Store().Receipt(ctx, id)
	if err != nil {
		return fencegate.Receipt{}, err
	}
	if rc.State.Terminal() {
		return fencegate.Receipt{}, &fencegate.Error{Code: fencegate.CodeReceiptSettled, ReceiptID: id,
			Message: fmt.Sprintf("receipt %s is already %s", id, rc.State)}
	}
	if rc.State != fencegate.ReceiptUnknown {
		return fencegate.Receipt{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "receipt %s is %s, not UNKNOWN", id, rc.State)
	}
	if s.Reconciler != nil && !s.Reconciler.AwaitsPerson(rc) {
		return fencegate.Receipt{}, &fencegate.Error{Code: fencegate.CodeStillReconciling, ReceiptID: id,
			Message: fmt.Sprintf("receipt %s is still being reconciled; resolve it once it is overdue or its strategy has given up", id)}
	}
	if until, may := s.reconcilerMayStillLand(rc); may && in.State == fencegate.ReceiptNotApplied {
		return fencegate.Receipt{}, &fencegate.Error{Code: fencegate.CodeStillReconciling, ReceiptID: id,
			Message: fmt.Sprintf("receipt %s's write can still land until %s; resolve it NOT_APPLIED after that", id, until.UTC().Format(time.RFC3339))}
	}
	if s.Reconciler != nil && s.Reconciler.MayBeResending(rc) {
		// A resend was claimed and may still be open (gateway.Resender).
		return fencegate.Receipt{}, &fencegate.Error{Code: fencegate.CodeStillReconciling, ReceiptID: id,
			Message: fmt.Sprintf("receipt %s may have a resend in flight; resolve it once the API's timeout has passed since its last attempt", id)}
	}
	note := "resolved by operator " + caller
	if in.Note != "" {
		note += ": " + in.Note
	}
	// Conditional: a resend claimed since the read makes it STILL_RECONCILING.
	o := fencegate.Outcome{State: in.State, Error: note, Now: s.Now()}
	if rc.SettledAt != nil {
		o.IfSettledAt = *rc.SettledAt
	}
	if in.State == fencegate.ReceiptCommitted {
		if o.Version, err = s.committedObjectVersion(ctx, rc); err != nil {
			return fencegate.Receipt{}, err
		}
	}
	out, err := s.Gateway.Store().Settle(ctx, id, o)
	if err != nil {
		return fencegate.Receipt{}, err
	}
	s.Log.Info("audit: operator resolved an UNKNOWN receipt", "caller", caller, "receipt", id, "resource", rc.Resource,
		"fence", rc.FenceToken, "segment", rc.Segment, "state", in.State, "note", in.Note)
	return out, nil
}

// committedObjectVersion is the version an operator's COMMITTED verdict on an
// object receipt records: the object must carry the receipt (its ETag chains
// the next write), or, for a delete, be gone. Other targets record none.
func (s *Server) committedObjectVersion(ctx context.Context, rc fencegate.Receipt) (string, error) {
	store, key, ok := fencegate.SplitObjectTarget(rc.Target)
	if !ok {
		return "", nil
	}
	st, err := s.objectStore(store)
	if err != nil {
		return "", err
	}
	info, err := st.Head(ctx, key)
	gone := fencegate.ErrorCode(err) == fencegate.CodeNotFound
	if err != nil && !gone {
		return "", err // the store cannot tell (BACKEND_UNAVAILABLE): no verdict is recorded
	}
	if rc.Method == http.MethodDelete {
		if gone {
			return "", nil
		}
		return "", fencegate.Errorf(fencegate.CodeInvalidRequest, "the object still exists: the delete is not committed")
	}
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); gone || !ok || m.ReceiptID != rc.ID {
		return "", fencegate.Errorf(fencegate.CodeInvalidRequest, "the object does not carry receipt %s: the write is not committed", rc.ID)
	}
	return info.ETag, nil
}

// reconcilerMayStillLand is Reconciler.MayStillLand, false without one.
func (s *Server) reconcilerMayStillLand(r fencegate.Receipt) (time.Time, bool) {
	if s.Reconciler == nil {
		return time.Time{}, false
	}
	return s.Reconciler.MayStillLand(r)
}
