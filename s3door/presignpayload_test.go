package s3door_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// sha256hex is the lower-case hex SHA-256 of s.
func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// presignPut presigns PUT /b/<key> with aws-sdk-go-v2's signer over the
// payload hash UNSIGNED-PAYLOAD (or the X-Amz-Content-Sha256 in query),
// with query added to the URL before signing and headers signed as headers
// (not moved into the query). It returns the request to send: that URL,
// body, and the signed headers.
func (e *env) presignPut(t *testing.T, key, query string, headers map[string]string, body string) *http.Request {
	t.Helper()
	u := e.srv.URL + "/b/" + key + "?X-Amz-Expires=300" + query
	req, _ := http.NewRequest(http.MethodPut, u, nil)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	payload := "UNSIGNED-PAYLOAD"
	if v := req.URL.Query().Get("X-Amz-Content-Sha256"); v != "" {
		payload = v
	}
	signed, h, err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping, o.DisableHeaderHoisting = true, true }).PresignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: "AKIDA", SecretAccessKey: e.creds["AKIDA"].SecretAccessKey}, req, payload, "s3", "us-east-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	put, _ := http.NewRequest(http.MethodPut, signed, strings.NewReader(body))
	for k, v := range h {
		put.Header[k] = v
	}
	return put
}

// sendRaw sends req as it is and returns its status, its answer's Fence-Receipt and its body.
func (e *env) sendRaw(t *testing.T, req *http.Request) (int, string, string) {
	t.Helper()
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Fence-Receipt"), string(b)
}

// Rule: on a presigned request the x-amz-content-sha256 header, when sent,
// is honoured as on a header-signed one, never ignored: a STREAMING-*
// value (an aws-chunked body) is refused 501 as in the query, a hex value
// that is not the body's SHA-256 is XAmzContentSHA256Mismatch, a value
// that is none of S3's is InvalidArgument, and so is one that differs from
// the URL's X-Amz-Content-Sha256; each writes nothing (no object, no
// receipt, the fence unchanged).
func TestAPresignedPutWithAnUnhonouredContentSHA256HeaderIsRefused(t *testing.T) {
	const framed = "2\r\npp\r\n0\r\n\r\n"
	for _, c := range []struct {
		name    string
		query   string
		signed  map[string]string // signed as headers
		header  []string          // x-amz-content-sha256 values sent, unsigned
		chunked bool              // Content-Encoding: aws-chunked
		body    string
		status  int
		code    string
	}{
		{name: "unsigned streaming with a trailer", header: []string{"STREAMING-UNSIGNED-PAYLOAD-TRAILER"}, chunked: true, body: framed,
			status: 501, code: "NotImplemented"},
		{name: "signed streaming", signed: map[string]string{"X-Amz-Decoded-Content-Length": "2"},
			header: []string{"STREAMING-AWS4-HMAC-SHA256-PAYLOAD"}, chunked: true, body: framed, status: 501, code: "NotImplemented"},
		{name: "signed streaming with a trailer", header: []string{"STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"}, chunked: true, body: framed,
			status: 501, code: "NotImplemented"},
		{name: "not a payload hash", header: []string{"garbage"}, body: "pp", status: 400, code: "InvalidArgument"},
		{name: "empty", header: []string{""}, body: "pp", status: 400, code: "InvalidArgument"},
		{name: "two values", header: []string{"UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER"}, chunked: true, body: framed,
			status: 400, code: "InvalidArgument"},
		{name: "another body's SHA-256", header: []string{sha256hex("other")}, body: "pp", status: 400, code: "XAmzContentSHA256Mismatch"},
		{name: "the framed body's SHA-256 for its decoded bytes", header: []string{sha256hex("pp")}, chunked: true, body: framed,
			status: 501, code: "NotImplemented"},
		{name: "aws-chunked with UNSIGNED-PAYLOAD", header: []string{"UNSIGNED-PAYLOAD"}, chunked: true, body: framed,
			status: 501, code: "NotImplemented"},
		{name: "aws-chunked with no header", chunked: true, body: framed, status: 501, code: "NotImplemented"},
		{name: "differs from the query's", query: "&X-Amz-Content-Sha256=UNSIGNED-PAYLOAD", header: []string{sha256hex("pp")}, body: "pp",
			status: 400, code: "InvalidArgument"},
		{name: "streaming against the query's UNSIGNED-PAYLOAD", query: "&X-Amz-Content-Sha256=UNSIGNED-PAYLOAD",
			header: []string{"STREAMING-UNSIGNED-PAYLOAD-TRAILER"}, chunked: true, body: framed, status: 400, code: "InvalidArgument"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.lease("AKIDA", owner, "b/r")
			before := e.fingerprint("b/r")
			req := e.presignPut(t, "r/k", c.query, c.signed, c.body)
			req.Header["X-Amz-Content-Sha256"] = c.header
			if c.chunked {
				req.Header.Set("Content-Encoding", "aws-chunked")
			}
			status, receipt, out := e.sendRaw(t, req)
			if status != c.status || !strings.Contains(out, "<Code>"+c.code+"</Code>") {
				t.Fatalf("presigned PUT with x-amz-content-sha256 %q: %d %s, want %d %s", c.header, status, out, c.status, c.code)
			}
			if receipt != "" || e.fingerprint("b/r") != before {
				t.Fatalf("a refused presigned PUT changed state (receipt %q)", receipt)
			}
		})
	}
}

// Rule: a presigned PUT whose x-amz-content-sha256 header is UNSIGNED-PAYLOAD,
// the body's SHA-256, or the same as the URL's X-Amz-Content-Sha256 writes
// the body as sent.
func TestAPresignedPutWithAnAgreeingContentSHA256HeaderWrites(t *testing.T) {
	e := newEnv(t, nil)
	c := e.client(e.lease("AKIDA", owner, "b/r"))
	for i, h := range []struct{ query, header string }{
		{"", "UNSIGNED-PAYLOAD"},
		{"", sha256hex("pp")},
		{"&X-Amz-Content-Sha256=UNSIGNED-PAYLOAD", "UNSIGNED-PAYLOAD"},
		{"&X-Amz-Content-Sha256=" + url.QueryEscape(sha256hex("pp")), sha256hex("pp")},
	} {
		key := "r/ok" + string(rune('a'+i))
		req := e.presignPut(t, key, h.query, nil, "pp")
		req.Header.Set("X-Amz-Content-Sha256", h.header)
		if status, receipt, out := e.sendRaw(t, req); status != 200 || receipt == "" {
			t.Fatalf("presigned PUT (query %q) with x-amz-content-sha256 %s: %d %s", h.query, h.header, status, out)
		}
		got, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String("b"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(got.Body)
		got.Body.Close()
		if string(b) != "pp" {
			t.Fatalf("the object is %q, want %q", b, "pp")
		}
	}
}

// Rule: a header-signed request declares one x-amz-content-sha256; two
// values are InvalidArgument and write nothing.
func TestAHeaderSignedPutWithTwoContentSHA256ValuesIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.lease("AKIDA", owner, "b/r")
	before := e.fingerprint("b/r")
	req := e.signedLines(t, "AKIDA", http.MethodPut, "/b/r/k", "", nil, "pp")
	req.Header.Add("X-Amz-Content-Sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
	if status, receipt, out := e.sendRaw(t, req); status != 400 || receipt != "" || !strings.Contains(out, "<Code>InvalidArgument</Code>") {
		t.Fatalf("header-signed PUT with two x-amz-content-sha256 values: %d %s", status, out)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused PUT changed state")
	}
}

// Rule: a header-signed PUT declaring Content-Encoding aws-chunked with a
// payload hash that is no STREAMING-* form (here the signed SHA-256 of the
// framed bytes) is NotImplemented and writes nothing: it used to be stored
// with its chunk framing.
func TestAnAWSChunkedBodyWithoutAStreamingPayloadHashIsRefused(t *testing.T) {
	const framed = "2\r\npp\r\n0\r\n\r\n"
	e := newEnv(t, nil)
	e.lease("AKIDA", owner, "b/r")
	before := e.fingerprint("b/r")
	req := e.signedLines(t, "AKIDA", http.MethodPut, "/b/r/k", "", http.Header{"Content-Encoding": {"aws-chunked"}}, framed)
	if status, receipt, out := e.sendRaw(t, req); status != 501 || receipt != "" || !strings.Contains(out, "<Code>NotImplemented</Code>") {
		t.Fatalf("aws-chunked with a hex payload hash: %d %s, want 501 NotImplemented", status, out)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a refused PUT changed state")
	}
}
