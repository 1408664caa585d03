package s3_test

import (
	"crypto/md5"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// ignoringServer is an S3 look-alike (path-style) that ignores conditional
// headers: PUT/GET/HEAD/DELETE always succeed with 200.
func ignoringServer(t *testing.T) *httptest.Server {
	var mu sync.Mutex
	objects := map[string][]byte{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body := objects[r.URL.Path]
		sum := md5.Sum(body)
		switch r.Method {
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			objects[r.URL.Path] = b
			sum = md5.Sum(b)
			w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
		case http.MethodGet, http.MethodHead:
			w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
			w.Header().Set("Content-Length", "0")
		case http.MethodDelete:
			delete(objects, r.URL.Path)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func client(endpoint, ak, sk string) *s3.Client {
	return s3.New(s3.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(ak, sk, ""),
	})
}

// conditionalServer honours If-None-Match: * and If-Match on PUT (412 when
// they fail) and answers a HEAD with the object's quoted MD5 ETag, but a
// PUT with etag(the quoted MD5): a store whose PUT and HEAD disagree.
func conditionalServer(t *testing.T, etag func(quoted string) string) *httptest.Server {
	var mu sync.Mutex
	objects := map[string][]byte{}
	quoted := func(b []byte) string { sum := md5.Sum(b); return `"` + hex.EncodeToString(sum[:]) + `"` }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, exists := objects[r.URL.Path]
		switch r.Method {
		case http.MethodPut:
			if (r.Header.Get("If-None-Match") == "*" && exists) ||
				(r.Header.Get("If-Match") != "" && (!exists || r.Header.Get("If-Match") != quoted(body))) {
				w.WriteHeader(http.StatusPreconditionFailed)
				return
			}
			b, _ := io.ReadAll(r.Body)
			objects[r.URL.Path] = b
			w.Header().Set("ETag", etag(quoted(b)))
		case http.MethodHead:
			if !exists {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.Header().Set("ETag", quoted(body))
			w.Header().Set("Content-Length", "0")
		case http.MethodDelete:
			delete(objects, r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv
}
