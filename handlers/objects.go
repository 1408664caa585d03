package handlers

import (
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// objectPath splits /v1/objects/{store}/{key...}, or the query form
// /v1/objects/{store}?key={key}, into a canonical store and key.
// Percent-encoded slashes or backslashes in the path, and any key that fails
// fencegate.CheckName, are refused rather than normalised. The query form
// exists for generated clients, which escape a path parameter's slashes:
// its value is decoded exactly once (url.ParseQuery) and then checked like a
// path key, so a key that still carries "%" (double encoding) is refused.
func objectPath(r *http.Request) (store, key string, err error) {
	if err := noEncodedSlashes(r, "object keys"); err != nil {
		return "", "", err
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/objects/")
	if !ok {
		return "", "", fencegate.Errorf(fencegate.CodeInvalidRequest, "not an object path")
	}
	store, key, nested := strings.Cut(rest, "/")
	key, err = queryKey(r, key, nested)
	if err != nil {
		return "", "", err
	}
	if store == "" || key == "" {
		return "", "", fencegate.Errorf(fencegate.CodeInvalidRequest, "object path must be /v1/objects/{store}/{key} or /v1/objects/{store}?key={key}")
	}
	if err := fencegate.CheckName(store + "/" + key); err != nil {
		return "", "", err
	}
	return store, key, nil
}

// queryKey returns the key of a request: the path's (inPath, when the path
// named one) or the single `key` query parameter. A request naming a key both
// ways, or the parameter twice, or with a query that does not parse, is
// refused: one request names one key. So is any other query parameter: these
// routes take none, and one a caller meant (a segment, a version) must not be
// silently dropped from what is then written, read or deleted.
func queryKey(r *http.Request, pathKey string, inPath bool) (string, error) {
	if r.URL.RawQuery == "" {
		return pathKey, nil
	}
	q, err := parseQuery(r)
	if err != nil {
		return "", err
	}
	for name := range q {
		if name != "key" {
			return "", fencegate.Errorf(fencegate.CodeInvalidRequest, "query parameter %.40q is not taken here: the only one is key (?key={key} names the key instead of the path)", name)
		}
	}
	keys, inQuery := q["key"]
	switch {
	case !inQuery:
		return pathKey, nil
	case inPath:
		return "", fencegate.Errorf(fencegate.CodeInvalidRequest, "give the key in the path or in ?key=, not both")
	case len(keys) != 1:
		return "", fencegate.Errorf(fencegate.CodeInvalidRequest, "give ?key= once")
	}
	return keys[0], nil
}

// noEncodedSlashes refuses a path whose raw form hides a slash or backslash
// (%2F, %5C): decoding it would turn one name into another.
func noEncodedSlashes(r *http.Request, what string) error {
	if raw := strings.ToLower(r.URL.RawPath); strings.Contains(raw, "%2f") || strings.Contains(raw, "%5c") {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "encoded slashes are not allowed in %s", what)
	}
	return nil
}

func (s *Server) objectStore(name string) (fencegate.ObjectStore, error) {
	st, ok := s.Stores[name]
	if !ok {
		return nil, fencegate.Errorf(fencegate.CodeNotFound, "no object store named %q", name)
	}
	return st, nil
}

// fenceHeaders are the fence headers a fenced mutation may carry, each at
// most once.
var fenceHeaders = []string{"Fence-Grant", "Fence-Status", "Fence-Delegation", "Fence-Segment", "Fence-Effect-Key"}

// fenceRequest reads the fence headers common to every fenced mutation. A
// fence header given twice is ambiguous (a proxy or log may read the other
// one) and INVALID_REQUEST, whatever the values.
func fenceRequest(r *http.Request, caller string) (gateway.Request, error) {
	for _, name := range fenceHeaders {
		if n := len(r.Header.Values(name)); n > 1 {
			return gateway.Request{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "%s is given %d times; send it once", name, n)
		}
	}
	req := gateway.Request{
		Caller:      caller,
		GrantToken:  strings.TrimSpace(r.Header.Get("Fence-Grant")),
		StatusToken: strings.TrimSpace(r.Header.Get("Fence-Status")),
		// Fence-Delegation: the caller writes as the delegate it names.
		DelegationToken: strings.TrimSpace(r.Header.Get("Fence-Delegation")),
		Method:          r.Method,
	}
	seg, ok := fencegate.ParseCanonicalUint(r.Header.Get("Fence-Segment"))
	if !ok || seg == 0 {
		return req, fencegate.Errorf(fencegate.CodeInvalidRequest, "Fence-Segment must be a decimal integer >= 1 without sign or leading zero")
	}
	req.Segment = seg
	req.EffectKey = r.Header.Get("Fence-Effect-Key")
	if err := fencegate.CheckEffectKey(req.EffectKey); err != nil {
		return req, fencegate.Errorf(fencegate.CodeInvalidRequest, "Fence-Effect-Key: %s", fencegate.ErrorMessage(err))
	}
	return req, nil
}

// objectRequest reads what every fenced object mutation carries: the caller,
// the canonical store and key, and the fence headers. The grant is verified
// here too, before any body is read.
func (s *Server) objectRequest(r *http.Request) (gateway.Request, fencegate.ObjectStore, string, error) {
	caller, err := s.Auth.Authenticate(r)
	if err != nil {
		return gateway.Request{}, nil, "", err
	}
	store, key, err := objectPath(r)
	if err != nil {
		return gateway.Request{}, nil, "", err
	}
	st, err := s.objectStore(store)
	if err != nil {
		return gateway.Request{}, nil, "", err
	}
	req, err := fenceRequest(r, caller)
	if err != nil {
		return gateway.Request{}, nil, "", err
	}
	req.Resource = fencegate.ObjectResource(store, key)
	req.Target = fencegate.ObjectTarget(store, key)
	if err := s.preauthorize(r, &req); err != nil {
		return gateway.Request{}, nil, "", err
	}
	return req, st, key, nil
}

func (s *Server) putObject(w http.ResponseWriter, r *http.Request) {
	req, st, key, err := s.objectRequest(r)
	if err == nil {
		err = fencegate.CheckContentTypeLines(r.Header.Values("Content-Type"))
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	body, err := s.spool(r, s.MaxBody)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	defer body.Close()
	req.PayloadDigest = body.Digest()
	req.PayloadSize, req.QuarantinePayload = body.Size, body.Keep(s.quarantinePayload())
	req.Effect = gateway.ObjectPut{Store: st, Key: key, Body: body.Reader(), Size: body.Size, ContentType: r.Header.Get("Content-Type")}
	s.apply(w, r, req)
}

func (s *Server) deleteObject(w http.ResponseWriter, r *http.Request) {
	req, st, key, err := s.objectRequest(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	req.PayloadDigest = emptyDigest
	req.Effect = gateway.ObjectDelete{Store: st, Key: key}
	s.apply(w, r, req)
}

// preauthorize verifies the grant and status when the request's headers
// arrive, so a refused request is answered before its body is read. Apply
// verifies again at admission: a status proof must still be fresh once the
// body is in (long uploads use query mode or a longer proof life). On a
// shadow-mode resource a verdict is left to Apply, which records it
// (Gateway.ShadowsRefusal).
func (s *Server) preauthorize(r *http.Request, req *gateway.Request) error {
	err := s.Gateway.Precheck(r.Context(), *req)
	if err != nil && !s.Gateway.ShadowsRefusal(req.Resource, err) {
		return err
	}
	return nil
}

// markShadow sets the headers of a request shadow mode forwarded despite a refusal.
func markShadow(w http.ResponseWriter, res gateway.Result) bool {
	if res.Verdict == "" {
		return false
	}
	w.Header().Set("Fence-Mode", "shadow")
	w.Header().Set("Fence-Verdict", string(res.Verdict))
	return true
}

// apply runs the acceptance point and answers with the receipt.
func (s *Server) apply(w http.ResponseWriter, r *http.Request, req gateway.Request) {
	res, err := s.Gateway.Apply(r.Context(), req)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	if markShadow(w, res) { // refused, recorded, forwarded anyway; no receipt kept
		writeJSON(w, http.StatusOK, res.Receipt)
		return
	}
	w.Header().Set("Fence-Receipt", res.Receipt.ID)
	if res.Replay {
		w.Header().Set("Fence-Replay", "true")
	}
	writeJSON(w, http.StatusOK, res.Receipt)
}

func (s *Server) getObject(w http.ResponseWriter, r *http.Request) {
	caller, err := s.Auth.Authenticate(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	store, key, err := objectPath(r)
	if err == nil {
		err = s.checkRead(caller, fencegate.ObjectResource(store, key))
	}
	if err != nil {
		s.problem(w, r, err)
		return
	}
	st, err := s.objectStore(store)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	rc, info, err := st.Get(r.Context(), key)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	defer rc.Close()
	h := w.Header()
	if info.ContentType != "" {
		h.Set("Content-Type", info.ContentType)
	} else {
		h.Set("Content-Type", "application/octet-stream")
	}
	h.Set("Content-Length", strconv.FormatInt(info.Size, 10))
	notAPage(h)
	h.Set("ETag", info.ETag)
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); ok {
		h.Set("Fence-Token", strconv.FormatUint(m.FenceToken, 10))
		h.Set("Fence-Segment", strconv.FormatUint(m.Segment, 10))
		h.Set("Fence-Root", fencegate.EncodeHeaderText(m.Root)) // RFC 2047 words unless printable ASCII
		h.Set("Fence-Operation-Id", fencegate.EncodeHeaderText(m.OperationID))
		h.Set("Fence-Payload-Digest", m.PayloadDigest)
		h.Set("Fence-Receipt", m.ReceiptID)
	}
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, rc)
	}
}
