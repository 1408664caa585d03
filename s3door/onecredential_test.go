package s3door_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Rule: a request carries one credential. A header-signed PUT with a second
// Authorization line (whichever comes first), or a presigned PUT that also
// carries an Authorization header, is InvalidArgument, S3's answer to the
// second, and writes nothing (no object, no receipt, the fence unchanged):
// the first line alone used to be verified, and a proxy reading the last one
// would see another caller.
func TestARequestWithMoreThanOneCredentialIsRefused(t *testing.T) {
	signedPut := func(t *testing.T, e *env, secret string) *http.Request {
		req, _ := http.NewRequest(http.MethodPut, e.srv.URL+"/b/r/k", strings.NewReader("pp"))
		req.Header.Set("X-Amz-Content-Sha256", sha256hex("pp"))
		if err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
			aws.Credentials{AccessKeyID: "AKIDA", SecretAccessKey: secret}, req, sha256hex("pp"), "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		return req
	}
	for name, build := range map[string]func(t *testing.T, e *env, secret string) *http.Request{
		"a second line after the signed one": func(t *testing.T, e *env, secret string) *http.Request {
			req := signedPut(t, e, secret)
			req.Header.Add("Authorization", "Bearer someone-else")
			return req
		},
		"a second line before the signed one": func(t *testing.T, e *env, secret string) *http.Request {
			req := signedPut(t, e, secret)
			req.Header["Authorization"] = append([]string{"AWS4-HMAC-SHA256 Credential=AKIDB/20300101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"}, req.Header["Authorization"]...)
			return req
		},
		"the signed line twice": func(t *testing.T, e *env, secret string) *http.Request {
			req := signedPut(t, e, secret)
			req.Header.Add("Authorization", req.Header.Get("Authorization"))
			return req
		},
		"an Authorization header beside a presigned query": func(t *testing.T, e *env, _ string) *http.Request {
			req := e.presignPut(t, "r/k", "", nil, "pp")
			req.Header.Set("Authorization", "Bearer someone-else")
			return req
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, nil)
			cred := e.lease("AKIDA", owner, "b/r")
			before := e.fingerprint("b/r")
			status, receipt, out := e.sendRaw(t, build(t, e, cred.SecretAccessKey))
			if status != http.StatusBadRequest || !strings.Contains(out, "<Code>InvalidArgument</Code>") {
				t.Fatalf("%d %s, want 400 InvalidArgument", status, out)
			}
			if receipt != "" || e.fingerprint("b/r") != before {
				t.Fatalf("a refused PUT changed state (receipt %q)", receipt)
			}
		})
	}
}
