package s3door

import (
	"encoding/xml"
	"errors"
	"log/slog"
	"net/http"

	"github.com/fencegate/fencegate"
)

// S3's error format (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html):
// an XML document <Error><Code/><Message/><Resource/><RequestId/></Error>
// with the HTTP status of the code. This file is the front door's one place
// where errors become answers, as handlers/problem.go is for the REST API.

// s3Error is an S3-specific refusal (SignatureDoesNotMatch, NoSuchKey, ...).
type s3Error struct {
	status  int
	code    string
	message string
}

func (e *s3Error) Error() string { return e.code + ": " + e.message }

func s3err(status int, code, message string) error {
	return &s3Error{status: status, code: code, message: message}
}

func notImplemented(what string) error {
	return s3err(http.StatusNotImplemented, "NotImplemented", what+" is not implemented by the Fencegate S3 front door")
}

// errorBody is the XML of an S3 error.
type errorBody struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource"`
	RequestID string   `xml:"RequestId"`
	// FenceCode and ReceiptID are Fencegate's additions for refusals of the
	// acceptance point (S3 clients ignore unknown elements).
	FenceCode string `xml:"FenceCode,omitempty"`
	ReceiptID string `xml:"FenceReceiptId,omitempty"`
}

// fenceS3 maps a Fencegate code to the S3 status and code a client
// understands. Refusals of the acceptance point are 403 AccessDenied (not
// retried by the SDKs) or 409 OperationAborted; transient faults are 503 so
// that clients retry (a retry of the same bytes is answered from the
// original receipt).
var fenceS3 = map[fencegate.Code]struct {
	status int
	code   string
}{
	fencegate.CodeUnauthenticated:    {http.StatusForbidden, "AccessDenied"},
	fencegate.CodeGrantInvalid:       {http.StatusForbidden, "AccessDenied"},
	fencegate.CodeStatusInvalid:      {http.StatusForbidden, "AccessDenied"},
	fencegate.CodeEpochRevoked:       {http.StatusForbidden, "AccessDenied"},
	fencegate.CodeOwnerMismatch:      {http.StatusForbidden, "AccessDenied"},
	fencegate.CodeResourceMismatch:   {http.StatusForbidden, "AccessDenied"},
	fencegate.CodePolicyStale:        {http.StatusForbidden, "AccessDenied"},
	fencegate.CodeForbidden:          {http.StatusForbidden, "AccessDenied"},
	fencegate.CodeStaleOwner:         {http.StatusForbidden, "AccessDenied"},
	fencegate.CodeFenceRegression:    {http.StatusForbidden, "AccessDenied"},
	fencegate.CodeSegmentOutOfOrder:  {http.StatusConflict, "OperationAborted"},
	fencegate.CodeQuarantined:        {http.StatusConflict, "OperationAborted"},
	fencegate.CodeBackendConflict:    {http.StatusConflict, "OperationAborted"},
	fencegate.CodeResourceBusy:       {http.StatusServiceUnavailable, "SlowDown"},
	fencegate.CodeBackendUnavailable: {http.StatusServiceUnavailable, "ServiceUnavailable"},
	fencegate.CodeMutationUnknown:    {http.StatusInternalServerError, "InternalError"},
	fencegate.CodeInvalidRequest:     {http.StatusBadRequest, "InvalidRequest"},
	fencegate.CodeNotFound:           {http.StatusNotFound, "NoSuchKey"},
	fencegate.CodeUnsupported:        {http.StatusNotImplemented, "NotImplemented"},
	fencegate.CodeInternal:           {http.StatusInternalServerError, "InternalError"},
}

// answerOf is the S3 answer to err: its status, S3 code and message (a
// Fencegate error's Message starts with its code, "STALE_OWNER: ...", which
// the AWS CLI and the SDKs print), and the Fencegate error itself if it is
// one.
func answerOf(err error) (status int, code, message string, fe *fencegate.Error) {
	var se *s3Error
	switch {
	case errors.As(err, &se):
		return se.status, se.code, se.message, nil
	case errors.As(err, &fe):
		m, ok := fenceS3[fe.Code]
		if !ok {
			m.status, m.code = http.StatusForbidden, "AccessDenied"
		}
		return m.status, m.code, string(fe.Code) + ": " + fe.Message, fe
	}
	return http.StatusInternalServerError, "InternalError", "internal error", nil
}

// refused tells Refused (counted and logged as the REST API's refusals) of
// an error answer to r, a whole request's or one key's of a DeleteObjects;
// without Refused it logs failures at Error and refusals at Debug.
func (s *Server) refused(r *http.Request, err error, status int, s3Code, message string, attrs ...any) {
	switch {
	case s.Refused != nil:
		code, caller := fenceCode(err, status), ""
		if a, ok := r.Context().Value(authedKey{}).(*authed); ok {
			caller = a.cred.Identity
		}
		attrs = append(attrs, "method", r.Method, "path", r.URL.Path, "code", code, "s3Code", s3Code)
		if status >= 500 {
			attrs = append(attrs, "err", err)
		} else {
			attrs = append(attrs, "detail", message)
		}
		s.Refused(r.Context(), code, status, caller, attrs...)
	case status >= 500 && status != http.StatusNotImplemented:
		s.Log.Error("s3 request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	default:
		s.Log.Debug("s3 request refused", "method", r.Method, "path", r.URL.Path, "code", s3Code, "err", err)
	}
}

// writeError answers err as an S3 error document; its Fencegate code, if it
// has one, is also in the Fence-Code header.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	body := errorBody{Resource: r.URL.Path, RequestID: requestID(w)}
	status, code, message, fe := answerOf(err)
	body.Code, body.Message = code, message
	if fe != nil {
		body.FenceCode, body.ReceiptID = string(fe.Code), fe.ReceiptID
		w.Header().Set("Fence-Code", string(fe.Code))
		if fe.ReceiptID != "" {
			w.Header().Set("Fence-Receipt", fe.ReceiptID)
		}
	}
	s.refused(r, err, status, body.Code, body.Message)
	if r.Method == http.MethodHead { // a HEAD answer has no body
		w.WriteHeader(status)
		return
	}
	writeXML(w, status, body)
}

// s3Auth are the S3 error codes of a request whose signature or credential
// was refused: UNAUTHENTICATED, as the REST API answers a bad credential.
var s3Auth = map[string]bool{
	"AccessDenied": true, "InvalidAccessKeyId": true, "SignatureDoesNotMatch": true, "RequestTimeTooSkewed": true,
	"InvalidToken": true, "ExpiredToken": true, "AuthorizationHeaderMalformed": true, "AuthorizationQueryParametersError": true,
}

// fenceCode is the Fencegate code an error answer with status stands for,
// the label it is counted under: a Fencegate error's own code; for an
// S3-specific refusal, the code the REST API answers the same fault with
// (UNAUTHENTICATED, NOT_FOUND, UNSUPPORTED, INVALID_REQUEST); else INTERNAL.
func fenceCode(err error, status int) fencegate.Code {
	var fe *fencegate.Error
	var se *s3Error
	switch {
	case errors.As(err, &se):
	case errors.As(err, &fe):
		return fe.Code
	default:
		return fencegate.CodeInternal
	}
	switch {
	case s3Auth[se.code]:
		return fencegate.CodeUnauthenticated
	case status == http.StatusNotFound:
		return fencegate.CodeNotFound
	case status == http.StatusNotImplemented:
		return fencegate.CodeUnsupported
	case status >= 500:
		return fencegate.CodeInternal
	default:
		return fencegate.CodeInvalidRequest
	}
}

func writeXML(w http.ResponseWriter, status int, v any) {
	out, err := xml.Marshal(v)
	if err != nil {
		slog.Error("s3: encoding a response failed", "err", err)
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(out)
}
