package handlers

import (
	"io"
	"net/http"
	"strings"

	"github.com/fencegate/fencegate"
)

// readHopByHop are upstream answer headers that describe the upstream
// connection or would set state in the worker's client; they are not passed on.
var readHopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade", "Set-Cookie", "Content-Length",
}

// readAPI passes a read through: GET /v1/apis/{api}/{path...}?query on a GET
// route the API declares. The caller must be an authenticated workload that
// MayRead lets read the route's resource; no grant, status or segment is
// needed (fence headers are ignored and never forwarded), nothing is fenced,
// serialised or stored. The gateway's upstream credential is injected as for
// writes, and the upstream's answer, of any status, is streamed back as it is
// (without connection headers and cookies). Query strings are forwarded.
func (s *Server) readAPI(w http.ResponseWriter, r *http.Request) {
	caller, name, path, api, err := s.apiTarget(r)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	_, resource, ok := api.MatchHeader(http.MethodGet, path, r.Header)
	if !ok {
		s.problem(w, r, fencegate.Errorf(fencegate.CodeNotFound, "api %q declares no read route GET %s", name, path))
		return
	}
	if err := s.checkRead(caller, resource); err != nil {
		s.problem(w, r, err)
		return
	}
	if err := noBody(r); err != nil {
		s.problem(w, r, err)
		return
	}
	resp, err := api.Read(r.Context(), path, upstreamQuery(r), r.Header)
	if err != nil {
		s.problem(w, r, err)
		return
	}
	defer resp.Body.Close()
	drop := make(map[string]bool, len(readHopByHop))
	for _, k := range readHopByHop {
		drop[k] = true
	}
	for _, v := range resp.Header.Values("Connection") { // hop-by-hop too (RFC 9110 §7.6.1)
		for _, k := range strings.Split(v, ",") {
			drop[http.CanonicalHeaderKey(strings.TrimSpace(k))] = true
		}
	}
	h := w.Header()
	for k, v := range resp.Header {
		if !drop[http.CanonicalHeaderKey(k)] {
			passHeader(h, k, v...)
		}
	}
	notAPage(h)
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		s.Log.Warn("api read broke off", "api", name, "path", path, "err", err)
	}
}

// passHeader adds an upstream answer's header k to the gateway's answer h,
// unless the gateway answers that header itself: X-Request-Id (every answer
// carries the caller's ID or a generated one, never an upstream's:
// openapi.yaml), and any header already set on h (a shadow verdict's
// Fence-Mode and Fence-Verdict). The upstream's value is dropped, not
// renamed.
func passHeader(h http.Header, k string, v ...string) {
	k = http.CanonicalHeaderKey(k)
	if _, own := h[k]; own || k == RequestIDHeader {
		return
	}
	h[k] = append([]string(nil), v...)
}
