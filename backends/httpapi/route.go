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
	headers  map[string]string // resource parameter -> canonical header name
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
	switch m {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	case http.MethodGet: // a read route: passed through unfenced, never stored (read.go)
	default:
		return route{}, fencegate.Errorf(fencegate.CodeInvalidRequest, "method %q must be GET (a read), POST, PUT, PATCH or DELETE", r.Method)
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
		params[param] = true
		headers[param] = http.CanonicalHeaderKey(h)
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
	for param := range headers {
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

// bind adds the header-bound parameters of h to params; false when one is
// missing, repeated or not one canonical segment.
func (r *route) bind(params map[string]string, h http.Header) bool {
	for param, name := range r.headers {
		v := h.Values(name)
		if len(v) != 1 || strings.Contains(v[0], "/") || fencegate.CheckName(v[0]) != nil {
			return false
		}
		params[param] = v[0]
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

// MatchHeader is Match for a request with header h: a route that binds
// resource parameters to headers (Route.Headers) matches only when each
// header carries exactly one value that is one canonical segment.
func (a *API) MatchHeader(method, path string, h http.Header) (tmpl, resource string, ok bool) {
	p, found := strings.CutPrefix(path, "/")
	if !found || fencegate.CheckName(p) != nil || strings.ContainsAny(p, "?#") {
		return "", "", false
	}
	parts := strings.Split(p, "/")
	for i := range a.routes {
		r := &a.routes[i]
		if params, ok := r.match(method, parts); ok && r.bind(params, h) {
			res := r.derive(params)
			if fencegate.CheckName(res) != nil {
				return "", "", false
			}
			return r.path, res, true
		}
	}
	return "", "", false
}
