package handlers

import (
	"net/http"
	"net/url"

	"github.com/fencegate/fencegate"
)

// strictQuery parses the query of a route that takes parameters (every list,
// and a lease's status) strictly: a query that does not parse (a bad
// percent-escape, a `;` separator), which r.URL.Query would silently drop
// part of, is INVALID_REQUEST, and so is any parameter given more than once
// (`limit=1&limit=1000`, `s3Credentials=true&s3Credentials=false`), which
// reading only the first of would make ambiguous. The object and API routes
// parse their own queries as strictly (queryKey, apiCallPath).
func strictQuery(r *http.Request) (url.Values, error) {
	q, err := parseQuery(r)
	if err != nil {
		return nil, err
	}
	if err := oneValueEach("query parameter", q); err != nil {
		return nil, err
	}
	return q, nil
}

// oneValueEach refuses (INVALID_REQUEST) values of which a name is given
// more than once: a query's parameters, a console form's fields. Read as
// its first, such a value could mean one thing here and another to a proxy
// or a log; the JSON routes refuse a duplicate member the same way.
func oneValueEach(kind string, vs url.Values) error {
	for name, v := range vs {
		if len(v) > 1 {
			return fencegate.Errorf(fencegate.CodeInvalidRequest, "%s %.40q is given more than once", kind, name)
		}
	}
	return nil
}

// parseQuery parses r's query whole: one that does not parse (a bad
// percent-escape, a `;` separator), which r.URL.Query would silently drop
// part of, is INVALID_REQUEST. Repeated parameters are the caller's to judge
// (strictQuery refuses them; an API read forwards them).
func parseQuery(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "the query does not parse: %v", err)
	}
	return q, nil
}

// listQuery parses a list's query (strictQuery) and reads the paging
// parameters every list takes: limit (1 to fencegate.MaxPageLimit,
// fencegate.DefaultPageLimit when absent) and cursor (the next of the
// previous page). Anything else is INVALID_REQUEST. The other parameters are
// the caller's to read from the values.
func listQuery(r *http.Request) (url.Values, fencegate.Page, error) {
	q, err := strictQuery(r)
	if err != nil {
		return nil, fencegate.Page{}, err
	}
	p := fencegate.Page{Cursor: q.Get("cursor")}
	if v, ok := q["limit"]; ok {
		n, ok := fencegate.ParseCanonicalUint(v[0])
		if !ok || n < 1 || n > fencegate.MaxPageLimit {
			return nil, p, fencegate.Errorf(fencegate.CodeInvalidRequest, "limit must be one decimal integer from 1 to %d", fencegate.MaxPageLimit)
		}
		p.Limit = int(n)
	}
	return q, p, nil
}

// pageOf is listQuery's page, for lists that take no other parameter.
func pageOf(r *http.Request) (fencegate.Page, error) {
	_, p, err := listQuery(r)
	return p, err
}
