package handlers

import (
	"net/http"
	"strings"
)

// s3Door hands a request signed with AWS Signature Version 4 to the S3
// front door (Server.S3), before any REST route sees it: S3 clients then use
// the gateway's own URL as their endpoint (path-style, /BUCKET/KEY), and a
// bucket may even be called "v1". Other requests go on to the REST routes.
func (s *Server) s3Door(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.S3 != nil && isSigV4(r) {
			s.S3.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isSigV4 reports whether r is signed the AWS way: Signature Version 4 in the
// header form (Authorization: AWS4-HMAC-SHA256 ...) or presigned
// (X-Amz-Algorithm / X-Amz-Signature / X-Amz-Credential in the query), or
// the retired Version 2 ("AWS AKID:sig"), which the front door refuses.
// https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-authenticating-requests.html
func isSigV4(r *http.Request) bool {
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "AWS4-") || strings.HasPrefix(h, "AWS ") { // SigV2 too, to be refused as S3 refuses it
		return true
	}
	if r.URL.RawQuery == "" {
		return false
	}
	q := r.URL.Query()
	return q.Has("X-Amz-Algorithm") || q.Has("X-Amz-Signature") || q.Has("X-Amz-Credential")
}
