package s3door_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAnUnsignedAmzHeaderIsRefused: an x-amz-* header the signature does
// not cover (added by whoever relays a signed request or holds a presigned
// URL) is refused as S3 refuses it, before anything is written; the same
// request without it is accepted.
func TestAnUnsignedAmzHeaderIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.lease("AKIDA", owner, "b/r")
	before := e.fingerprint("b/r")
	signedPut := func(extra map[string]string) *http.Request {
		req, _ := http.NewRequest(http.MethodPut, e.srv.URL+"/b/r/k", strings.NewReader("body"))
		sum := sha256.Sum256([]byte("body"))
		req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
		if err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
			aws.Credentials{AccessKeyID: "AKIDA", SecretAccessKey: cred.SecretAccessKey}, req, hex.EncodeToString(sum[:]), "s3", "us-east-1", time.Now()); err != nil {
			t.Fatal(err)
		}
		for k, v := range extra { // added after signing
			req.Header.Set(k, v)
		}
		return req
	}
	for _, h := range []string{"X-Amz-Meta-Fence-Segment", "X-Amz-Meta-Owner", "X-Amz-Checksum-Crc32"} {
		code, out := do(t, signedPut(map[string]string{h: "7"}))
		if code != 403 || !strings.Contains(out, "not signed") {
			t.Fatalf("header-signed PUT with unsigned %s: %d %s", h, code, out)
		}
	}
	pp, err := s3.NewPresignClient(e.client(cred)).PresignPutObject(context.Background(),
		&s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("r/p")}, s3.WithPresignExpires(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPut, pp.URL, strings.NewReader("body"))
	req.Header.Set("X-Amz-Meta-Fence-Segment", "7")
	if code, out := do(t, req); code != 403 || !strings.Contains(out, "not signed") {
		t.Fatalf("presigned PUT with an unsigned x-amz-meta header: %d %s", code, out)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a request with an unsigned x-amz-* header changed state")
	}
	if code, out := do(t, signedPut(nil)); code != 200 {
		t.Fatalf("the same PUT, all signed: %d %s", code, out)
	}
}

// Rule: an Authorization header whose credential date is not X-Amz-Date's
// day is 400 AuthorizationHeaderMalformed, as S3 answers it (it was 403
// SignatureDoesNotMatch), and changes nothing.
func TestACredentialDateOtherThanXAmzDateIsAuthorizationHeaderMalformed(t *testing.T) {
	e := newEnv(t, nil)
	cred := e.lease("AKIDA", owner, "b/r")
	before := e.fingerprint("b/r")
	at := time.Now().UTC()
	req, _ := http.NewRequest(http.MethodPut, e.srv.URL+"/b/r/k", strings.NewReader("body"))
	sum := sha256.Sum256([]byte("body"))
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	if err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
		aws.Credentials{AccessKeyID: "AKIDA", SecretAccessKey: cred.SecretAccessKey}, req, hex.EncodeToString(sum[:]), "s3", "us-east-1", at); err != nil {
		t.Fatal(err)
	}
	day, other := "/"+at.Format("20060102")+"/", "/"+at.AddDate(0, 0, -1).Format("20060102")+"/"
	req.Header.Set("Authorization", strings.Replace(req.Header.Get("Authorization"), day, other, 1))
	if code, out := do(t, req); code != 400 || !strings.Contains(out, "<Code>AuthorizationHeaderMalformed</Code>") {
		t.Fatalf("a credential dated the day before X-Amz-Date: %d %s", code, out)
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a malformed Authorization header changed state")
	}
}
