package app

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencegate/fencegate/s3cred"
)

// s3Keys are a lease's S3 credentials.
type s3Keys struct{ akid, secret string }

func (rw *routeWorld) acquireS3(token, resource, reqID string) (grant, s3Keys) {
	code, m := rw.do("POST", "/v1/leases", token, nil,
		fmt.Sprintf(`{"resource":%q,"requestId":%q,"ttlMs":60000,"operationId":"op","s3Credentials":true}`, resource, reqID))
	if code != 200 && code != 201 {
		rw.t.Fatalf("acquire %s: %d %v", resource, code, m)
	}
	rw.res = append(rw.res, resource)
	c, _ := m["s3Credentials"].(map[string]any)
	g, _ := m["grant"].(string)
	k := s3Keys{}
	k.akid, _ = c["accessKeyId"].(string)
	k.secret, _ = c["secretAccessKey"].(string)
	if k.akid == "" {
		rw.t.Fatalf("no S3 credentials: %v", m)
	}
	return grant{grant: g}, k
}

// s3 sends one S3 request through the binary's handler, signed with the
// SDK's signer under k (unsigned when k is empty).
func (rw *routeWorld) s3(method, target string, k s3Keys, body string) (int, string) {
	req := httptest.NewRequest(method, "http://gw"+target, strings.NewReader(body))
	if k.akid != "" {
		sum := sha256.Sum256([]byte(body))
		req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
		err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
			aws.Credentials{AccessKeyID: k.akid, SecretAccessKey: k.secret}, req, hex.EncodeToString(sum[:]), "s3", "us-east-1", time.Now())
		if err != nil {
			rw.t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	rw.h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// createUpload begins a multipart upload of key with one staged part and
// returns the Complete request's target and body.
func (rw *routeWorld) createUpload(t *testing.T, key string, k s3Keys) (string, string) {
	code, out := rw.s3("POST", "/local/"+key+"?uploads", k, "")
	var res struct {
		UploadID string `xml:"UploadId"`
	}
	if err := xml.Unmarshal([]byte(out), &res); code != 200 || err != nil {
		t.Fatalf("create upload: %d %s", code, out)
	}
	code, _ = rw.s3("PUT", "/local/"+key+"?partNumber=1&uploadId="+res.UploadID, k, "part-one")
	if code != 200 {
		t.Fatalf("upload part: %d", code)
	}
	m5 := md5.Sum([]byte("part-one"))
	etag := hex.EncodeToString(m5[:])
	return "/local/" + key + "?uploadId=" + res.UploadID,
		`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"` + etag + `"</ETag></Part></CompleteMultipartUpload>`
}

// TestEveryS3MutationIsFenced is TestEveryMutatingRouteIsFenced for the S3
// front door on the same listener: each S3 operation, sent with no
// signature, an unknown key, a wrong secret, another lease's credential (of
// another resource) and a superseded lease's credential, changes no state,
// and the superseded one's writes are refused STALE_OWNER; with the current
// lease's credential the writes change state and nothing else does.
func TestEveryS3MutationIsFenced(t *testing.T) {
	rw := newRouteWorld(t)
	type op struct {
		name   string
		fenced bool
		// req builds the request for the key; upload is a Complete's target and body for that key's credential.
		req func(key string, k s3Keys) (method, target, body string)
	}
	ops := []op{
		{"PutObject", true, func(key string, _ s3Keys) (string, string, string) { return "PUT", "/local/" + key, "two" }},
		{"DeleteObject", true, func(key string, _ s3Keys) (string, string, string) { return "DELETE", "/local/" + key, "" }},
		{"DeleteObjects", true, func(key string, _ s3Keys) (string, string, string) {
			return "POST", "/local?delete", "<Delete><Object><Key>" + key + "</Key></Object></Delete>"
		}},
		{"CompleteMultipartUpload", true, nil},
		{"CreateMultipartUpload", false, func(key string, _ s3Keys) (string, string, string) { return "POST", "/local/" + key + "?uploads", "" }},
		{"GetObject", false, func(key string, _ s3Keys) (string, string, string) { return "GET", "/local/" + key, "" }},
		{"HeadObject", false, func(key string, _ s3Keys) (string, string, string) { return "HEAD", "/local/" + key, "" }},
		{"ListObjectsV2", false, func(string, s3Keys) (string, string, string) { return "GET", "/local?list-type=2", "" }},
		{"ListBuckets", false, func(string, s3Keys) (string, string, string) { return "GET", "/", "" }},
		{"CopyObject", false, func(key string, _ s3Keys) (string, string, string) { return "PUT", "/local/" + key + "?tagging", "" }},
		{"CreateBucket", false, func(string, s3Keys) (string, string, string) { return "PUT", "/other-bucket", "" }},
	}
	for i, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			resource := fmt.Sprintf("local/s3rt%d", i)
			key := fmt.Sprintf("s3rt%d/k", i)
			_, a := rw.acquireS3("token-a", resource, fmt.Sprint("s3a", i))
			_, other := rw.acquireS3("token-a", fmt.Sprintf("local/s3other%d", i), fmt.Sprint("s3o", i))
			var staleUpload, staleBody string
			if o.req == nil {
				staleUpload, staleBody = rw.createUpload(t, key, a)
			}
			if code, m := rw.do("DELETE", "/v1/leases/"+leaseOfS3(t, rw, a), "token-a", nil, ""); code >= 300 {
				t.Fatalf("release: %d %v", code, m)
			}
			_, b := rw.acquireS3("token-b", resource, fmt.Sprint("s3b", i))
			if code, out := rw.s3("PUT", "/local/"+key, b, "one"); code != 200 {
				t.Fatalf("B's first write: %d %s", code, out)
			}
			reqFor := func(k s3Keys) (string, string, string) {
				if o.req != nil {
					return o.req(key, k)
				}
				if k == a {
					return "POST", staleUpload, staleBody
				}
				target, body := rw.createUpload(t, key, b)
				return "POST", target, body
			}
			var curMethod, curTarget, curBody string
			if o.req == nil {
				curMethod, curTarget, curBody = reqFor(b)
			}
			before := rw.fingerprint()
			for _, c := range []struct {
				what string
				k    s3Keys
			}{
				{"no signature", s3Keys{}},
				{"an unknown key", s3Keys{"FGLNOSUCHLEASE", "x"}},
				{"a wrong secret", s3Keys{b.akid, "wrong"}},
				{"another lease's credential", other},
				{"a superseded lease's credential", a},
			} {
				m, target, body := reqFor(c.k)
				if o.req == nil && c.k != a {
					m, target, body = curMethod, curTarget, curBody
				}
				code, out := rw.s3(m, target, c.k, body)
				if rw.fingerprint() != before {
					t.Fatalf("%s with %s answered %d %s and changed state", o.name, c.what, code, out)
				}
				if c.what == "a superseded lease's credential" && o.fenced && !strings.Contains(out, "STALE_OWNER") {
					t.Fatalf("%s with a superseded lease: %d %s, want STALE_OWNER", o.name, code, out)
				}
			}
			m, target, body := curMethod, curTarget, curBody
			if o.req != nil {
				m, target, body = o.req(key, b)
			}
			code, out := rw.s3(m, target, b, body)
			changed := rw.fingerprint() != before
			switch {
			case o.fenced && !changed:
				t.Fatalf("%s with the current lease answered %d %s and changed nothing: the proof is vacuous", o.name, code, out)
			case !o.fenced && changed:
				t.Fatalf("%s changed state but is not a fenced operation", o.name)
			}
		})
	}
}

// leaseOfS3 is the lease a credential's access key ID names.
func leaseOfS3(t *testing.T, rw *routeWorld, k s3Keys) string {
	t.Helper()
	id, err := s3cred.LeaseOf(k.akid)
	if err != nil {
		t.Fatalf("lease of %s: %v", k.akid, err)
	}
	return id
}
