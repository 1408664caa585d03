package openapi_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestEveryGetAnswersHead: RFC 9110 §9.1 requires HEAD wherever GET is
// supported. For every GET operation of the spec, HEAD answers the status
// and Content-Type GET answers, and no body (RFC 9110 §9.3.2), read off the
// wire.
func TestEveryGetAnswersHead(t *testing.T) {
	e := newEnv(t)
	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)
	param := regexp.MustCompile(`\{[^}]+\}`)
	for _, op := range specOperations(e.doc) {
		method, path, _ := strings.Cut(op, " ")
		if method != http.MethodGet {
			continue
		}
		url := param.ReplaceAllString(path, "local")
		t.Run(url, func(t *testing.T) {
			get := rawRequest(t, srv, "GET", url)
			head := rawRequest(t, srv, "HEAD", url)
			if head.StatusCode != get.StatusCode || head.Header.Get("Content-Type") != get.Header.Get("Content-Type") {
				t.Errorf("HEAD %s: %d %q, GET: %d %q", url, head.StatusCode, head.Header.Get("Content-Type"),
					get.StatusCode, get.Header.Get("Content-Type"))
			}
			if head.rest != "" {
				t.Errorf("HEAD %s answered a body: %.80q", url, head.rest)
			}
		})
	}
}

type rawAnswer struct {
	*http.Response
	rest string // every byte after the header section
}

// rawRequest sends one request over its own connection (closed after it)
// and reads the answer's header section and whatever follows it.
func rawRequest(t *testing.T, srv *httptest.Server, method, path string) rawAnswer {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = io.WriteString(conn, method+" "+path+" HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer "+tokA+"\r\nConnection: close\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		head.WriteString(line)
		if line == "\r\n" {
			break
		}
	}
	rest, _ := io.ReadAll(br)
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(head.String())), nil)
	if err != nil {
		t.Fatal(err)
	}
	return rawAnswer{Response: resp, rest: string(rest)}
}

// TestWrongMethodNamesTheAllowedOnes: a routed path asked with a method it
// does not serve answers 400 INVALID_REQUEST (the closed code set has no
// 405) as problem+json with an Allow header listing the methods the path
// serves (RFC 9110 §10.2.1), HEAD wherever GET is, and changes nothing; a
// method no route knows on an unrouted path is NOT_FOUND, as any unrouted
// path is.
func TestWrongMethodNamesTheAllowedOnes(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ method, path, tok, allow string }{
		{"HEAD", "/v1/leases", tokA, "POST"},
		{"GET", "/v1/leases", tokA, "POST"},
		{"OPTIONS", "/v1/objects/local/inv/7", tokA, "GET, HEAD, PUT, DELETE"},
		{"OPTIONS", "/v1/objects/local/inv/7", "", "GET, HEAD, PUT, DELETE"},
		{"PATCH", "/v1/objects/local/inv/7", tokA, "GET, HEAD, PUT, DELETE"},
		{"POST", "/v1/objects/local/inv/7", tokA, "GET, HEAD, PUT, DELETE"},
		{"PUT", "/v1/receipts", tokA, "GET, HEAD"},
		{"PROPFIND", "/v1/receipts", tokA, "GET, HEAD"},
		{"HEAD", "/v1/admin/keys/rotate", tokAdmin, "POST"},
		{"GET", "/v1/leases/l1/renew", tokA, "POST"},
		{"TRACE", "/v1/apis/payouts", tokA, "GET, HEAD, POST, PUT, PATCH, DELETE"},
	} {
		req := httptest.NewRequest(c.method, "http://gw"+c.path, strings.NewReader("x"))
		if c.tok != "" {
			req.Header.Set("Authorization", "Bearer "+c.tok)
		}
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest || rec.Header().Get("Content-Type") != "application/problem+json" ||
			rec.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s: %d %q Allow %q, want 400 problem+json Allow %q", c.method, c.path, rec.Code,
				rec.Header().Get("Content-Type"), rec.Header().Get("Allow"), c.allow)
		}
		if c.method != "HEAD" && !strings.Contains(rec.Body.String(), `"code":"INVALID_REQUEST"`) {
			t.Errorf("%s %s: %s", c.method, c.path, rec.Body.String())
		}
	}
	req := httptest.NewRequest("PROPFIND", "http://gw/v1/nope", nil)
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotFound || rec.Header().Get("Allow") != "" {
		t.Errorf("PROPFIND /v1/nope: %d Allow %q, want 404 without Allow", rec.Code, rec.Header().Get("Allow"))
	}
	e.call("GET", "/v1/objects/local/inv/7", tokA, nil, "", 404)
	e.wantNothingChanged()
}
