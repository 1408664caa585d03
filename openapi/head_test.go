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
