package s3door_test

import (
	"net/http"
	"strings"
	"testing"
)

// Rule: a request carries one credential. A header-signed PUT with a second
// Authorization line (whichever comes first) is AuthorizationHeaderMalformed,
// counted UNAUTHENTICATED as on the REST API; a presigned PUT that also
// carries an Authorization header is InvalidArgument, S3's answer. Each
// writes nothing (no object, no receipt, the fence unchanged): the first
// line alone used to be verified, and a proxy reading the last one would see
// another caller.
func TestARequestWithMoreThanOneCredentialIsRefused(t *testing.T) {
	signedPut := func(t *testing.T, e *env) *http.Request {
		return e.signedLines(t, "AKIDA", http.MethodPut, "/b/r/k", "", nil, "pp")
	}
	type attempt struct {
		build func(t *testing.T, e *env) *http.Request
		code  string
	}
	for name, c := range map[string]attempt{
		"a second line after the signed one": {func(t *testing.T, e *env) *http.Request {
			req := signedPut(t, e)
			req.Header.Add("Authorization", "Bearer someone-else")
			return req
		}, "AuthorizationHeaderMalformed"},
		"a second line before the signed one": {func(t *testing.T, e *env) *http.Request {
			req := signedPut(t, e)
			req.Header["Authorization"] = append([]string{"AWS4-HMAC-SHA256 Credential=AKIDB/20300101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"}, req.Header["Authorization"]...)
			return req
		}, "AuthorizationHeaderMalformed"},
		"the signed line twice": {func(t *testing.T, e *env) *http.Request {
			req := signedPut(t, e)
			req.Header.Add("Authorization", req.Header.Get("Authorization"))
			return req
		}, "AuthorizationHeaderMalformed"},
		"an Authorization header beside a presigned query": {func(t *testing.T, e *env) *http.Request {
			req := e.presignPut(t, "r/k", "", nil, "pp")
			req.Header.Set("Authorization", "Bearer someone-else")
			return req
		}, "InvalidArgument"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.lease("AKIDA", owner, "b/r")
			before := e.fingerprint("b/r")
			status, receipt, out := e.sendRaw(t, c.build(t, e))
			if status != http.StatusBadRequest || !strings.Contains(out, "<Code>"+c.code+"</Code>") {
				t.Fatalf("%d %s, want 400 %s", status, out, c.code)
			}
			if receipt != "" || e.fingerprint("b/r") != before {
				t.Fatalf("a refused PUT changed state (receipt %q)", receipt)
			}
		})
	}
}

// Rule: the values a signature is checked with are each read once: a second
// X-Amz-Date line after a header-signed request's own (AccessDenied), or a
// presigning parameter given twice in the query (InvalidArgument), is
// refused and writes nothing; the first was read and the rest ignored.
func TestASigningValueGivenTwiceIsRefused(t *testing.T) {
	for name, c := range map[string]struct {
		edit   func(req *http.Request)
		status int
		code   string
	}{
		"a second X-Amz-Date line": {func(req *http.Request) { req.Header.Add("X-Amz-Date", "20000101T000000Z") }, 403, "AccessDenied"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			e.lease("AKIDA", owner, "b/r")
			before := e.fingerprint("b/r")
			req := e.signedLines(t, "AKIDA", http.MethodPut, "/b/r/k", "", nil, "pp")
			c.edit(req)
			status, receipt, out := e.sendRaw(t, req)
			if status != c.status || !strings.Contains(out, "<Code>"+c.code+"</Code>") {
				t.Fatalf("%d %s, want %d %s", status, out, c.status, c.code)
			}
			if receipt != "" || e.fingerprint("b/r") != before {
				t.Fatalf("a refused PUT changed state (receipt %q)", receipt)
			}
		})
	}
	t.Run("a presigning parameter twice", func(t *testing.T) {
		e := newEnv(t, nil)
		e.lease("AKIDA", owner, "b/r")
		before := e.fingerprint("b/r")
		req := e.presignPut(t, "r/k", "", nil, "pp")
		req.URL.RawQuery += "&X-Amz-Signature=" + strings.Repeat("0", 64)
		status, receipt, out := e.sendRaw(t, req)
		if status != 400 || !strings.Contains(out, "<Code>InvalidArgument</Code>") {
			t.Fatalf("%d %s, want 400 InvalidArgument", status, out)
		}
		if receipt != "" || e.fingerprint("b/r") != before {
			t.Fatalf("a refused PUT changed state (receipt %q)", receipt)
		}
	})
}
