package s3door

import (
	"net/http"
	"net/textproto"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// The request a signature is checked over: the client's request rebuilt
// with only what it signed (sigv4.go verifies it).

// rebuild is r as the client signed it: method, path as received, the given
// raw query, and only the headers it names as signed. The signer takes host
// from req.Host (the Host header as received, port and all), X-Amz-Date from
// the signing time and X-Amz-Security-Token from the credentials; every
// other signed header, content-length included, is in req.Header. host must
// be signed (SigV4 requires it).
func rebuild(r *http.Request, signedHeaders []string, rawQuery string) (*http.Request, error) {
	req := &http.Request{
		Method: r.Method,
		URL:    &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: rawQuery},
		Host:   r.Host,
		Header: http.Header{},
	}
	host := false
	for _, name := range signedHeaders {
		switch name {
		case "host":
			host = true
		case "content-length":
			v := r.Header.Get("Content-Length") // the server keeps the header; a handler called directly may not
			if v == "" {
				v = strconv.FormatInt(r.ContentLength, 10)
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, signatureMismatch()
			}
			req.Header.Set("Content-Length", v)
			req.ContentLength = n // what the SDK's signer (STREAMING-* only) signs instead of the header
		default:
			if name != strings.ToLower(name) {
				return nil, signatureMismatch()
			}
			vs := r.Header.Values(name)
			if len(vs) == 0 {
				return nil, s3err(http.StatusForbidden, "AccessDenied", "signed header "+name+" is missing from the request")
			}
			cs := make([]string, len(vs))
			for i, v := range vs {
				cs[i] = collapseSpaces(v)
			}
			req.Header[textproto.CanonicalMIMEHeaderKey(name)] = cs
		}
	}
	if !host {
		return nil, signatureMismatch()
	}
	return req, nil
}

// collapseSpaces turns each run of spaces inside a header value into one, as
// the canonical header value ("Trimall") has it; the signer trims the ends.
func collapseSpaces(v string) string {
	for strings.Contains(v, "  ") {
		v = strings.ReplaceAll(v, "  ", " ")
	}
	return v
}

func sameHeaders(a, b []string) bool {
	a, b = append([]string(nil), a...), append([]string(nil), b...)
	sort.Strings(a)
	sort.Strings(b)
	return strings.Join(a, ";") == strings.Join(b, ";")
}
