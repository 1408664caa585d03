package httpapi

import (
	"net/http"
	"slices"
	"strings"

	"github.com/fencegate/fencegate"
)

// route is a compiled Route: literal segments and single-segment parameters.
type route struct {
	method   string
	path     string
	segs     []segment
	resource []segment         // split on "/" like segs
	headers  map[string]string // canonical header name -> the resource parameter it binds
	settle   Settle            // the route's, or the API's (defaults applied)
}

// segment is a literal, or a parameter when param is set.
type segment struct {
	lit   string
	param string
}

// compileRoute checks a route: an allowed method (GET declares a read), a path template of literal
// segments and {param} segments (unique names), and a resource template that
// uses only the path's parameters and forms a canonical name.
func compileRoute(r Route) (route, error) {
	m := strings.ToUpper(r.Method)
	switch {
	case fencegate.IsFencedAPIMethod(m):
	case m == http.MethodGet: // a read route: passed through unfenced, never stored (read.go)
	default:
		return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "method %q must be GET (a read) or a fenced write, one of %s", r.Method, strings.Join(fencegate.FencedAPIMethods(), ", "))
	}
	p, ok := strings.CutPrefix(r.Path, "/")
	if !ok {
		return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "path %q must start with /", r.Path)
	}
	segs, err := parseTemplate(p)
	if err != nil {
		return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "path %q: %s", r.Path, fencegate.ErrorMessage(err))
	}
	params := map[string]bool{}
	for _, s := range segs {
		if s.param == "" {
			continue
		}
		if params[s.param] {
			return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "path %q repeats parameter {%s}", r.Path, s.param)
		}
		params[s.param] = true
	}
	headers := map[string]string{}
	for param, h := range r.Headers {
		switch {
		case !validParam(param):
			return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "headers: parameter %q must be letters, digits or _", param)
		case params[param]:
			return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "headers: parameter {%s} is a path parameter already", param)
		case !validHeaderName(h) || isNeverForwarded(http.CanonicalHeaderKey(h)):
			return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "headers: %q is not a header a worker may send upstream", h)
		}
		if _, dup := headers[http.CanonicalHeaderKey(h)]; dup {
			return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "headers: %s binds two parameters", h)
		}
		params[param] = true
		headers[http.CanonicalHeaderKey(h)] = param
	}
	res, err := parseTemplate(r.Resource)
	if err != nil {
		return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "resource %q: %s", r.Resource, fencegate.ErrorMessage(err))
	}
	for _, s := range res {
		if s.param != "" && !params[s.param] {
			return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "resource %q uses {%s}, which path %q does not define", r.Resource, s.param, r.Path)
		}
	}
	for _, param := range headers {
		if !slices.ContainsFunc(res, func(s segment) bool { return s.param == param }) {
			return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "headers binds {%s}, which resource %q does not use", param, r.Resource)
		}
	}
	return route{method: m, path: r.Path, segs: segs, resource: res, headers: headers}, nil
}

// parseTemplate splits a template into segments; each literal must be
// canonical and each parameter a whole segment named by letters, digits or _.
func parseTemplate(t string) ([]segment, error) {
	if t == "" {
		return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "empty template")
	}
	var out []segment
	for _, part := range strings.Split(t, "/") {
		if name, ok := strings.CutPrefix(part, "{"); ok {
			name, ok = strings.CutSuffix(name, "}")
			if !ok || !validParam(name) {
				return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "segment %q must be a literal or a whole {param}", part)
			}
			out = append(out, segment{param: name})
			continue
		}
		if strings.ContainsAny(part, "{}") {
			return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "segment %q must be a literal or a whole {param}", part)
		}
		if err := fencegate.CheckName(part); err != nil {
			return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "segment %q is not canonical: %s", part, fencegate.ErrorMessage(err))
		}
		out = append(out, segment{lit: part})
	}
	return out, nil
}

func validParam(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// match binds path segments (already canonical) to r's template.
func (r *route) match(method string, parts []string) (map[string]string, bool) {
	if method != r.method || len(parts) != len(r.segs) {
		return nil, false
	}
	params := map[string]string{}
	for i, s := range r.segs {
		if s.param != "" {
			params[s.param] = parts[i]
		} else if s.lit != parts[i] {
			return nil, false
		}
	}
	return params, true
}

// bind adds the header-bound parameters of fwd (the headers the upstream
// is sent) to params. bound is every header some route of the API binds:
// one this route binds must carry exactly one value that is one plain
// segment (boundValue), and one it does not bind must be absent, so that a
// header that selects what a call acts on never reaches the upstream
// outside the resource (through a route that does not bind it, a second
// value, or a Connection header that drops it after the resource was
// derived from it).
func (r *route) bind(params map[string]string, fwd http.Header, bound map[string]bool) bool {
	for name := range bound {
		v := fwd.Values(name)
		param, binds := r.headers[name]
		if !binds {
			if len(v) > 0 {
				return false
			}
			continue
		}
		if len(v) != 1 || !boundValue(v[0]) {
			return false
		}
		params[param] = v[0]
	}
	return true
}

// boundValue reports whether v may name a resource segment: 1 to 255
// letters, digits, '.', '_' or '-', and a canonical name (not "." or
// ".."). Anything more (a comma, a space, a format character) could mean
// one thing to the policy and another to the upstream.
func boundValue(v string) bool {
	if len(v) == 0 || len(v) > 255 || fencegate.CheckName(v) != nil {
		return false
	}
	for _, c := range []byte(v) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// derive fills the resource template with params.
func (r *route) derive(params map[string]string) string {
	parts := make([]string, len(r.resource))
	for i, s := range r.resource {
		if s.param != "" {
			parts[i] = params[s.param]
		} else {
			parts[i] = s.lit
		}
	}
	return strings.Join(parts, "/")
}

// Match finds the first declared route allowing method on path (which must be
// canonical: "/" followed by a name passing fencegate.CheckName, without
// '?' or '#') and returns its path template and the derived resource. ok is
// false for undeclared routes and non-canonical paths. A decoded path with
// '?' (sent as %3F) would derive a resource of its own ("payouts/acc_1?")
// while the kept request, cut at '?' when sent, reaches the same upstream
// target as another resource's calls: a second fence line for one target.
func (a *API) Match(method, path string) (tmpl, resource string, ok bool) {
	return a.MatchHeader(method, path, nil)
}

// MatchHeader is Match for a request with header h, judged by the headers
// the upstream would be sent (allowedHeader): a route that binds resource
// parameters to headers (Route.Headers) matches only when each carries
// exactly one plain value, and a route that does not bind a header another
// route binds matches only when it is absent.
func (a *API) MatchHeader(method, path string, h http.Header) (tmpl, resource string, ok bool) {
	r, _, res, ok := a.matchCall(method, path, h)
	if !ok {
		return "", "", false
	}
	return r.path, res, true
}

// MatchCall is MatchHeader for a fenced call: the resource it is fenced
// under, and the target its receipt records: fencegate.BoundAPITarget of
// the API's name, the path and the values of the headers the route binds,
// so that each account a header selects on one path is a target of its own.
func (a *API) MatchCall(method, path string, h http.Header) (target, resource string, ok bool) {
	r, params, res, ok := a.matchCall(method, path, h)
	if !ok {
		return "", "", false
	}
	bound := make(map[string]string, len(r.headers))
	for name, param := range r.headers {
		bound[name] = params[param]
	}
	return fencegate.BoundAPITarget(a.cfg.Name, path, bound), res, true
}

// matchCall is the route matching method, path and the headers of h an
// upstream would be sent, its parameters and the resource it derives.
func (a *API) matchCall(method, path string, h http.Header) (*route, map[string]string, string, bool) {
	r, params, ok := a.route(method, path, a.allowedHeader(h))
	if !ok {
		return nil, nil, "", false
	}
	res := r.derive(params)
	if fencegate.CheckName(res) != nil {
		return nil, nil, "", false
	}
	return r, params, res, true
}

// route is the first route matching method, path and the forwarded
// headers fwd, with its parameters.
func (a *API) route(method, path string, fwd http.Header) (*route, map[string]string, bool) {
	p, found := strings.CutPrefix(path, "/")
	if !found || fencegate.CheckName(p) != nil || strings.ContainsAny(p, "?#") {
		return nil, nil, false
	}
	parts := strings.Split(p, "/")
	for i := range a.routes {
		r := &a.routes[i]
		if params, ok := r.match(method, parts); ok && r.bind(params, fwd, a.bound) {
			return r, params, true
		}
	}
	return nil, nil, false
}
