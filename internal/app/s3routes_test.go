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
	"github.com/fencegate/fencegate/s3door"
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
func (rw *routeWorld) createUpload(t *testing.T, key string, k s3Keys) s3Upload {
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
	return s3Upload{"/local/" + key + "?uploadId=" + res.UploadID,
		`<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"` + etag + `"</ETag></Part></CompleteMultipartUpload>`}
}

// s3Upload is an open multipart upload: its request target
// (/local/KEY?uploadId=ID) and the body completing it.
type s3Upload struct{ target, complete string }

// s3Cases builds, for each entry of s3door.Operations, a request of that
// operation for key under an upload of the sending credential.
var s3Cases = map[string]func(key string, up s3Upload) (method, target, body string){
	"ListBuckets":       func(string, s3Upload) (string, string, string) { return "GET", "/", "" },
	"HeadBucket":        func(string, s3Upload) (string, string, string) { return "HEAD", "/local", "" },
	"GetBucketLocation": func(string, s3Upload) (string, string, string) { return "GET", "/local?location", "" },
	"ListObjects":       func(string, s3Upload) (string, string, string) { return "GET", "/local?list-type=2", "" },
	"CreateBucket":      func(string, s3Upload) (string, string, string) { return "PUT", "/local", "" },
	"DeleteObjects": func(key string, _ s3Upload) (string, string, string) {
		return "POST", "/local?delete", "<Delete><Object><Key>" + key + "</Key></Object></Delete>"
	},
	"UploadPart": func(_ string, up s3Upload) (string, string, string) {
		return "PUT", strings.Replace(up.target, "?", "?partNumber=2&", 1), "part-two"
	},
	"PutObject":               func(key string, _ s3Upload) (string, string, string) { return "PUT", "/local/" + key, "two" },
	"CreateMultipartUpload":   func(key string, _ s3Upload) (string, string, string) { return "POST", "/local/" + key + "?uploads", "" },
	"CompleteMultipartUpload": func(_ string, up s3Upload) (string, string, string) { return "POST", up.target, up.complete },
	"AbortMultipartUpload":    func(_ string, up s3Upload) (string, string, string) { return "DELETE", up.target, "" },
	"DeleteObject":            func(key string, _ s3Upload) (string, string, string) { return "DELETE", "/local/" + key, "" },
	"ListParts":               func(_ string, up s3Upload) (string, string, string) { return "GET", up.target, "" },
	"GetObject":               func(key string, _ s3Upload) (string, string, string) { return "GET", "/local/" + key, "" },
	"HeadObject":              func(key string, _ s3Upload) (string, string, string) { return "HEAD", "/local/" + key, "" },
}

// TestEveryS3MutationIsFenced is TestEveryMutatingRouteIsFenced for the S3
// front door on the same listener. It walks s3door.Operations, the table the
// front door dispatches by (an operation without a case here fails it): each
// operation, sent with no signature, an unknown key, a wrong secret, another
// lease's credential (of another resource) and a superseded lease's
// credential, changes no state; a superseded lease's Mutates and Stages
// operations are refused STALE_OWNER; with the current lease's credential an
// operation marked Mutates changes state and no other one does.
func TestEveryS3MutationIsFenced(t *testing.T) {
	rw := newRouteWorld(t)
	served := map[string]bool{}
	for _, o := range s3door.Operations {
		served[o.Name] = true
		if s3Cases[o.Name] == nil {
			t.Errorf("s3door.Operations serves %s, which this test has no case for: add one", o.Name)
		}
	}
	for name := range s3Cases {
		if !served[name] {
			t.Errorf("case %s names no operation of s3door.Operations", name)
		}
	}
	for i, o := range s3door.Operations {
		reqFor := s3Cases[o.Name]
		if reqFor == nil {
			continue
		}
		t.Run(o.Name, func(t *testing.T) {
			resource := fmt.Sprintf("local/s3rt%d", i)
			key := fmt.Sprintf("s3rt%d/k", i)
			_, a := rw.acquireS3("token-a", resource, fmt.Sprint("s3a", i))
			_, other := rw.acquireS3("token-a", fmt.Sprintf("local/s3other%d", i), fmt.Sprint("s3o", i))
			staleUp := rw.createUpload(t, key, a)
			if code, m := rw.do("DELETE", "/v1/leases/"+leaseOfS3(t, rw, a), "token-a", nil, ""); code >= 300 {
				t.Fatalf("release: %d %v", code, m)
			}
			_, b := rw.acquireS3("token-b", resource, fmt.Sprint("s3b", i))
			if code, out := rw.s3("PUT", "/local/"+key, b, "one"); code != 200 {
				t.Fatalf("B's first write: %d %s", code, out)
			}
			curUp := rw.createUpload(t, key, b)
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
				up := curUp
				if c.k == a {
					up = staleUp
				}
				m, target, body := reqFor(key, up)
				code, out := rw.s3(m, target, c.k, body)
				if rw.fingerprint() != before {
					t.Fatalf("%s with %s answered %d %s and changed state", o.Name, c.what, code, out)
				}
				if c.k == a && (o.Mutates || o.Stages) && !strings.Contains(out, "STALE_OWNER") {
					t.Fatalf("%s with a superseded lease: %d %s, want STALE_OWNER", o.Name, code, out)
				}
			}
			m, target, body := reqFor(key, curUp)
			code, out := rw.s3(m, target, b, body)
			changed := rw.fingerprint() != before
			switch {
			case o.Mutates && !changed:
				t.Fatalf("%s with the current lease answered %d %s and changed nothing: the proof is vacuous", o.Name, code, out)
			case !o.Mutates && changed:
				t.Fatalf("%s changed state but is not marked Mutates in s3door.Operations", o.Name)
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
