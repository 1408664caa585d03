package httpapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// What a worker's request may carry to an upstream is an allowlist, the one
// place it is decided:
//
//   - content negotiation and the body's type (negotiated below);
//   - the headers the API declares in forwardHeaders;
//   - the gateway's own headers (the idempotency key, native fence headers,
//     the upstream credential), which the gateway sets itself and never takes
//     from the worker.
//
// Everything else is dropped. Some headers are never forwarded even when an
// API declares them (declaring one is a configuration error): hop-by-hop
// headers (RFC 9110 §7.6.1) and any header the request's Connection names;
// framing the transport recomputes; the worker's own credentials; headers
// that make an upstream or a proxy before it run another method
// (X-HTTP-Method-Override and kin) or another URL (X-Original-URL,
// X-Rewrite-URL); and forwarding headers (Forwarded, RFC 7239, X-Forwarded-*
// and kin) that would let a worker speak for the gateway about the client.

// negotiated are forwarded for every API: proactive content negotiation
// (RFC 9110 §12.5) and the media type of the body being sent (§8.3).
var negotiated = []string{"Accept", "Accept-Charset", "Accept-Language", "Content-Type"}

// neverForwarded are never sent from a worker, declared or not.
var neverForwarded = []string{
	// Hop-by-hop (RFC 9110 §7.6.1) and the legacy Proxy-Connection.
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
	// Framing and routing the transport sets; content coding it negotiates.
	"Host", "Content-Length", "Expect", "Accept-Encoding",
	// The worker's credentials toward the gateway.
	"Authorization", "Cookie",
	// Method override.
	"X-Http-Method-Override", "X-Http-Method", "X-Method-Override",
	// URL rewrite.
	"X-Original-Url", "X-Rewrite-Url", "X-Original-Uri",
	// Forwarding.
	"Forwarded", "Via", "X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "X-Cluster-Client-Ip",
}

// neverForwardedPrefixes are header families never sent from a worker.
var neverForwardedPrefixes = []string{"X-Forwarded-", "Fence-"}

// isNeverForwarded reports whether the canonical header name is refused
// whatever an API declares. Underscores count as dashes: CGI-style servers
// (RFC 3875 §4.1.18, Rack, WSGI) read X_Forwarded_For as X-Forwarded-For.
func isNeverForwarded(name string) bool {
	name = http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-"))
	if slices.Contains(neverForwarded, name) {
		return true
	}
	for _, p := range neverForwardedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// ownHeaders are the headers the gateway sets itself for this API.
func (a *API) ownHeaders() []string {
	own := []string{DefaultIdempotencyHeader, "X-Idempotency-Key"}
	if a.cfg.Key.Header != "" {
		own = append(own, a.cfg.Key.Header)
	}
	if nf := a.cfg.Contract.NativeFence; nf != nil {
		own = append(own, nf.Header, nf.SegmentHeader, nf.RootHeader, nf.DelegateHeader)
	}
	if a.cred != nil {
		own = append(own, a.cred.name)
	}
	return own
}

// allowedHeader is the part of a worker's header an upstream may see: the
// negotiated and declared headers, minus those never forwarded, those the
// request's Connection names, and the gateway's own. It is what a receipt
// keeps of the request; the credential is added when sending.
func (a *API) allowedHeader(in http.Header) http.Header {
	out := http.Header{}
	if in == nil {
		return out
	}
	dropped := map[string]bool{}
	for _, v := range in.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			dropped[http.CanonicalHeaderKey(strings.TrimSpace(name))] = true
		}
	}
	for _, name := range a.ownHeaders() {
		dropped[http.CanonicalHeaderKey(name)] = true
	}
	for _, list := range [][]string{negotiated, a.cfg.ForwardHeaders} {
		for _, name := range list {
			name = http.CanonicalHeaderKey(name)
			if v := in.Values(name); len(v) > 0 && !dropped[name] && !isNeverForwarded(name) {
				out[name] = slices.Clone(v)
			}
		}
	}
	return out
}

// checkForwardHeaders reports the forwardHeaders an API may not declare.
func (a APIConfig) checkForwardHeaders() []string {
	var bad []string
	for _, h := range a.ForwardHeaders {
		switch name := http.CanonicalHeaderKey(h); {
		case !validHeaderName(h):
			bad = append(bad, fmt.Sprintf("%q is not a valid header name", h))
		case isNeverForwarded(name):
			bad = append(bad, fmt.Sprintf("%s is never forwarded (hop-by-hop, credential, method override, URL rewrite, forwarding or fence header)", name))
		case a.Credentials != nil && strings.EqualFold(h, a.Credentials.Header), strings.EqualFold(h, a.Key.Header):
			bad = append(bad, fmt.Sprintf("%s is set by the gateway itself", name))
		}
	}
	return bad
}
