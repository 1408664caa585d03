package s3door_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate/internal/testenv"
)

// A client may list any header it sends in SignedHeaders, and S3 verifies
// the signature over exactly that list. The signers in these tests build the
// canonical request themselves, as clients with their own SigV4 code do
// (s3cmd's S3/Crypto.py), so they do not share the front door's rules about
// which headers a signer "should" sign.

func mac(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// signV4 is the SigV4 signature of a canonical request at amzDate in
// us-east-1 for s3.
func signV4(secret, amzDate, canonicalRequest string) string {
	h := sha256.Sum256([]byte(canonicalRequest))
	sts := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + amzDate[:8] + "/us-east-1/s3/aws4_request\n" + hex.EncodeToString(h[:])
	k := mac([]byte("AWS4"+secret), amzDate[:8])
	k = mac(k, "us-east-1")
	k = mac(k, "s3")
	k = mac(k, "aws4_request")
	return hex.EncodeToString(mac(k, sts))
}

// canonicalHeaders is the canonical header block and the SignedHeaders list
// of signed (lower-case names).
func canonicalHeaders(signed map[string]string) (block, list string) {
	var names []string
	for k := range signed {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		b.WriteString(k + ":" + strings.TrimSpace(signed[k]) + "\n")
	}
	return b.String(), strings.Join(names, ";")
}

// ownSignedPut is a PUT of body to path, header-signed over host,
// x-amz-date, x-amz-content-sha256 (payload, or the body's SHA-256 when
// empty) and every header in extra (lower-case names), then changed by
// tamper (may be nil) before it is sent.
func ownSignedPut(t *testing.T, e *env, akid, path, payload, body string, extra map[string]string, tamper func(*http.Request)) (int, string) {
	t.Helper()
	u, _ := url.Parse(e.srv.URL + path)
	amzDate := time.Now().UTC().Format("20060102T150405Z")
	if payload == "" {
		sum := sha256.Sum256([]byte(body))
		payload = hex.EncodeToString(sum[:])
	}
	signed := map[string]string{"host": u.Host, "x-amz-date": amzDate, "x-amz-content-sha256": payload}
	for k, v := range extra {
		signed[k] = v
	}
	block, list := canonicalHeaders(signed)
	sig := signV4(e.creds[akid].SecretAccessKey, amzDate,
		"PUT\n"+u.EscapedPath()+"\n\n"+block+"\n"+list+"\n"+payload)

	req, _ := http.NewRequest(http.MethodPut, u.String(), strings.NewReader(body))
	if body == "" {
		req.Body = http.NoBody // net/http still sends Content-Length: 0 on a PUT
	}
	for k, v := range signed {
		if k != "host" && k != "content-length" {
			req.Header.Set(k, v)
		}
	}
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+akid+"/"+amzDate[:8]+"/us-east-1/s3/aws4_request,SignedHeaders="+list+",Signature="+sig)
	if tamper != nil {
		tamper(req)
	}
	return do(t, req)
}

// TestSignedContentLengthOfAnEmptyBodyIsVerified: s3cmd signs content-length
// on every PUT, so an empty object (an empty file, a ".keep", a directory
// marker) arrives with "content-length:0" in its signed headers. That is a
// legal signed header like any other and the PUT is accepted, as the same
// request with a one-byte body is.
func TestSignedContentLengthOfAnEmptyBodyIsVerified(t *testing.T) {
	e := newEnv(t, nil)
	e.lease("AKIDA", owner, "b/r")
	for _, body := range []string{"x", ""} {
		extra := map[string]string{"content-length": strconv.Itoa(len(body)), "content-type": "text/plain"}
		if status, out := ownSignedPut(t, e, "AKIDA", "/b/r/len"+strconv.Itoa(len(body)), "", body, extra, nil); status != 200 {
			t.Fatalf("PUT of %d bytes signing content-length:%d: %d %s", len(body), len(body), status, out)
		}
	}
}

// TestSignedUserAgentIsVerifiedAndTamperingIsRefused: a header that SDK
// signers leave out of their own signatures (user-agent), signed by the
// client, is verified like any other; changing a signed header after signing
// (user-agent, or content-length with the body sent) is SignatureDoesNotMatch
// and writes nothing. The payload is UNSIGNED-PAYLOAD so that only the
// signed content-length ties the signature to the body's length.
func TestSignedUserAgentIsVerifiedAndTamperingIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	e.lease("AKIDA", owner, "b/r")
	extra := map[string]string{"user-agent": "own-signer/1.0", "content-length": "4"}
	before := e.fingerprint("b/r")
	for name, tamper := range map[string]func(*http.Request){
		"user-agent":     func(r *http.Request) { r.Header.Set("User-Agent", "relay/2.0") },
		"content-length": func(r *http.Request) { r.Body, r.ContentLength = io.NopCloser(strings.NewReader("body+")), 5 },
	} {
		status, out := ownSignedPut(t, e, "AKIDA", "/b/r/ua", "UNSIGNED-PAYLOAD", "body", extra, tamper)
		if status != 403 || !strings.Contains(out, "SignatureDoesNotMatch") {
			t.Fatalf("signed %s changed after signing: %d %s", name, status, out)
		}
	}
	if e.fingerprint("b/r") != before {
		t.Fatal("a request whose signed header was changed changed state")
	}
	if status, out := ownSignedPut(t, e, "AKIDA", "/b/r/ua", "UNSIGNED-PAYLOAD", "body", extra, nil); status != 200 {
		t.Fatalf("PUT signing user-agent and content-length: %d %s", status, out)
	}
}

// TestHostMustBeSigned: SigV4 requires host among the signed headers; a
// signature over the other headers only is refused.
func TestHostMustBeSigned(t *testing.T) {
	e := newEnv(t, nil)
	e.lease("AKIDA", owner, "b/r")
	status, out := ownSignedPut(t, e, "AKIDA", "/b/r/nohost", "", "x", nil, func(r *http.Request) {
		// re-sign without host in the list
		amzDate := r.Header.Get("X-Amz-Date")
		payload := r.Header.Get("X-Amz-Content-Sha256")
		block, list := canonicalHeaders(map[string]string{"x-amz-date": amzDate, "x-amz-content-sha256": payload})
		sig := signV4(e.creds["AKIDA"].SecretAccessKey, amzDate, "PUT\n/b/r/nohost\n\n"+block+"\n"+list+"\n"+payload)
		r.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDA/"+amzDate[:8]+"/us-east-1/s3/aws4_request,SignedHeaders="+list+",Signature="+sig)
	})
	if status != 403 || !strings.Contains(out, "SignatureDoesNotMatch") {
		t.Fatalf("a signature not covering host: %d %s", status, out)
	}
}

// TestPresignedURLSigningContentLengthOfAnEmptyBodyIsVerified: the same
// rule for a presigned URL: X-Amz-SignedHeaders=content-length;host for an
// empty PUT is verified over exactly those headers, and the URL does not
// admit a body of another length.
func TestPresignedURLSigningContentLengthOfAnEmptyBodyIsVerified(t *testing.T) {
	e := newEnv(t, nil)
	e.lease("AKIDA", owner, "b/r")
	u, _ := url.Parse(e.srv.URL + "/b/r/presigned-empty")
	amzDate := time.Now().UTC().Format("20060102T150405Z")
	q := url.Values{
		"X-Amz-Algorithm":     {"AWS4-HMAC-SHA256"},
		"X-Amz-Credential":    {"AKIDA/" + amzDate[:8] + "/us-east-1/s3/aws4_request"},
		"X-Amz-Date":          {amzDate},
		"X-Amz-Expires":       {"60"},
		"X-Amz-SignedHeaders": {"content-length;host"},
	}
	block, _ := canonicalHeaders(map[string]string{"content-length": "0", "host": u.Host})
	sig := signV4(e.creds["AKIDA"].SecretAccessKey, amzDate,
		"PUT\n"+u.EscapedPath()+"\n"+q.Encode()+"\n"+block+"\ncontent-length;host\nUNSIGNED-PAYLOAD")
	q.Set("X-Amz-Signature", sig)
	u.RawQuery = q.Encode()
	send := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, u.String(), strings.NewReader(body))
		if body == "" {
			req.Body = http.NoBody
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, out := send("x"); status != 403 || !strings.Contains(out, "SignatureDoesNotMatch") {
		t.Fatalf("a one-byte body on a URL signing content-length:0: %d %s", status, out)
	}
	if status, out := send(""); status != 200 {
		t.Fatalf("presigned empty PUT signing content-length:0: %d %s", status, out)
	}
}

// TestS3cmdPutsAnEmptyFile runs the real s3cmd (Debian's 2.3.0, which the
// README lists as tested; testenv.DebianClient: it fails in CI when
// missing) against the front door: it puts a
// one-byte file and an empty one, both signed over content-length, and the
// empty object is there afterwards with length 0.
func TestS3cmdPutsAnEmptyFile(t *testing.T) {
	s3cmd := testenv.DebianClient(t, "s3cmd", "s3cmd")
	e := newEnv(t, nil)
	c := e.lease("AKIDA", owner, "b/r")
	host := strings.TrimPrefix(e.srv.URL, "http://")
	dir := t.TempDir()
	for _, f := range []struct{ name, body string }{{"one-byte", "x"}, {"empty", ""}} {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, []byte(f.body), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(s3cmd, "--config=/dev/null", "--access_key="+c.AccessKeyID, "--secret_key="+c.SecretAccessKey,
			"--host="+host, "--host-bucket="+host, "--no-ssl", "--region=us-east-1", "put", p, "s3://b/r/"+f.name)
		cmd.Env = append(os.Environ(), "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("s3cmd put of the %s file: %v\n%s", f.name, err, out)
		}
	}
	h, err := e.client(c).HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("b"), Key: aws.String("r/empty")})
	if err != nil || aws.ToInt64(h.ContentLength) != 0 {
		t.Fatalf("the empty object after s3cmd put: %+v %v", h, err)
	}
}
