package s3door

import (
	"encoding/hex"
	"net/http"
	"net/url"
)

// The payload hash a request declares in x-amz-content-sha256, read the
// same way whether the request is header-signed or presigned.

// validPayloadHash: a hex SHA-256 or one of S3's literals; anything else
// would leave the body unchecked.
func validPayloadHash(v string) bool {
	switch v {
	case unsignedPayload, streamingSigned, streamingSignedTrailer, streamingUnsignedTrailer,
		"STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD", "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER":
		return true
	}
	_, err := hex.DecodeString(v)
	return len(v) == 64 && err == nil
}

// contentSHA256 is r's x-amz-content-sha256 header, the payload hash a
// header-signed request declares (S3 requires it there); a value other
// than one hex SHA-256 or one of S3's literals is InvalidArgument.
func contentSHA256(r *http.Request) (string, error) {
	v := headerValue(r.Header, "X-Amz-Content-Sha256") // two lines: "a,b", invalid
	if !validPayloadHash(v) {
		return "", s3err(http.StatusBadRequest, "InvalidArgument", "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-... or a hex SHA-256")
	}
	return v, nil
}

// presignedPayload is the payload hash of a presigned request: signed, the
// one its signature covers, and payload, the one its body is held to.
//
// A presigned URL's canonical request carries UNSIGNED-PAYLOAD: "You don't
// include a payload hash in the Canonical Request, because when you create
// a presigned URL, you don't know the payload content" (Authenticating
// Requests: Using Query Parameters (AWS Signature Version 4),
// https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html),
// or the X-Amz-Content-Sha256 a presigner put in its query. Whoever sends
// it may still send the header, which "provides a hash of the request
// payload" whatever the signature version 4 form (Common Request Headers,
// x-amz-content-sha256,
// https://docs.aws.amazon.com/AmazonS3/latest/API/RESTCommonRequestHeaders.html):
// it is read as on a header-signed request (contentSHA256), never ignored,
// so that a hex value is checked against the body and a STREAMING-* one
// (an aws-chunked body) is refused as in the query, not stored framed. It
// can only add a check: the signature stays over the URL's payload hash,
// and a header that differs from the query's is refused.
func presignedPayload(r *http.Request, q url.Values) (signed, payload string, err error) {
	signed = unsignedPayload
	if v := q.Get("X-Amz-Content-Sha256"); v != "" {
		if !validPayloadHash(v) {
			return "", "", s3err(http.StatusBadRequest, "InvalidArgument", "X-Amz-Content-Sha256 must be UNSIGNED-PAYLOAD, STREAMING-... or a hex SHA-256")
		}
		signed = v
	}
	if len(r.Header.Values("X-Amz-Content-Sha256")) == 0 {
		return signed, signed, nil
	}
	h, err := contentSHA256(r)
	if err != nil {
		return "", "", err
	}
	if q.Get("X-Amz-Content-Sha256") != "" && h != signed {
		return "", "", s3err(http.StatusBadRequest, "InvalidArgument", "the x-amz-content-sha256 header differs from the presigned URL's X-Amz-Content-Sha256")
	}
	return signed, h, nil
}
