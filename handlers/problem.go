package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/logctx"
	"github.com/fencegate/fencegate/internal/strictjson"
)

// Problem is an RFC 9457 problem document with the stable Fencegate code.
type Problem struct {
	Type      string         `json:"type"`
	Title     string         `json:"title"`
	Status    int            `json:"status"`
	Detail    string         `json:"detail,omitempty"`
	Instance  string         `json:"instance,omitempty"`
	Code      fencegate.Code `json:"code"`
	ReceiptID string         `json:"receiptId,omitempty"`
	// RequestID is the request's X-Request-Id (given or generated).
	RequestID string `json:"requestId,omitempty"`
}

// StatusOf is the HTTP status every error code maps to.
func StatusOf(code fencegate.Code) int {
	switch code {
	case fencegate.CodeUnauthenticated, fencegate.CodeGrantInvalid, fencegate.CodeStatusInvalid, fencegate.CodeEpochRevoked:
		return http.StatusUnauthorized
	case fencegate.CodeOwnerMismatch, fencegate.CodeResourceMismatch, fencegate.CodePolicyStale, fencegate.CodeForbidden,
		fencegate.CodeDelegationInvalid:
		return http.StatusForbidden
	case fencegate.CodeStaleOwner, fencegate.CodeSegmentOutOfOrder, fencegate.CodeQuarantined, fencegate.CodeFenceRegression,
		fencegate.CodeLeaseHeld, fencegate.CodeLeaseNotHeld, fencegate.CodeBackendConflict, fencegate.CodeResourceBusy,
		fencegate.CodeRequestIDConflict, fencegate.CodeStillReconciling, fencegate.CodeReceiptSettled:
		return http.StatusConflict
	case fencegate.CodeMutationUnknown:
		return http.StatusBadGateway
	case fencegate.CodeBackendUnavailable, fencegate.CodeStateLost:
		return http.StatusServiceUnavailable
	case fencegate.CodeInvalidRequest:
		return http.StatusBadRequest
	case fencegate.CodeNotFound:
		return http.StatusNotFound
	case fencegate.CodeUnsupported:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

// writeProblem is the one place where errors become HTTP answers. note is
// told of each answer (its code, status and the attributes of its log line).
func writeProblem(w http.ResponseWriter, r *http.Request, note func(code fencegate.Code, status int, attrs ...any), err error) {
	code := fencegate.ErrorCode(err)
	status := StatusOf(code)
	p := Problem{
		Type:      "urn:fencegate:problem:" + strings.ToLower(string(code)),
		Title:     strings.ReplaceAll(strings.ToLower(string(code)), "_", " "),
		Status:    status,
		Detail:    fencegate.ErrorMessage(err),
		Instance:  r.URL.Path,
		Code:      code,
		RequestID: logctx.RequestID(r.Context()),
	}
	var fe *fencegate.Error
	if errors.As(err, &fe) && fe.ReceiptID != "" {
		p.ReceiptID = fe.ReceiptID
		w.Header().Set("Fence-Receipt", fe.ReceiptID)
	}
	if status >= 500 {
		note(code, status, "method", r.Method, "path", r.URL.Path, "code", code, "err", err)
	} else {
		note(code, status, "method", r.Method, "path", r.URL.Path, "code", code, "detail", p.Detail)
	}
	if code == fencegate.CodeResourceBusy || code == fencegate.CodeBackendUnavailable || code == fencegate.CodeStateLost {
		// RFC 9110 §10.2.3: delay-seconds. A store or backend fault is worth
		// retrying at once; the settle of an applied effect is retried in the
		// background meanwhile.
		w.Header().Set("Retry-After", "1")
	}
	if fe != nil && fe.RetryAfter > 0 {
		// The upstream asked to wait before the same key is sent again.
		w.Header().Set("Retry-After", strconv.FormatInt(int64((fe.RetryAfter+time.Second-1)/time.Second), 10))
	}
	if status == http.StatusUnauthorized {
		// RFC 9110 §15.5.2: every 401 carries a challenge, whichever
		// credential (workload, grant, status proof) was refused.
		w.Header().Set("WWW-Authenticate", `Bearer realm="fencegate"`)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}

// notAPage marks an answer that carries stored or upstream bytes (an
// object, an API's answer) as data, never a page of this origin, which the
// console shares: nosniff keeps the type as sent, and the sandbox gives a
// document shown inline an origin of its own, so its script cannot post the
// console's forms. It is set last, over any upstream header of the same name.
func notAPage(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// maxJSONBody bounds a JSON request body.
const maxJSONBody = 64 << 10

// decodeJSON reads one strict JSON object of at most 64 KiB into v (a pointer
// to a struct) with package strictjson, the same rules as tokens and trust
// bundles: member names exactly v's json names (the spec's
// additionalProperties: false), each of required (the spec's required list)
// present, no duplicate member, no null, nothing after the object.
// Anything else is INVALID_REQUEST.
func decodeJSON(r *http.Request, v any, required ...string) error {
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxJSONBody))
	if err != nil {
		return fencegate.Wrap(err, fencegate.CodeInvalidRequest, fmt.Sprintf("request body is unreadable or larger than %d bytes", maxJSONBody))
	}
	if _, err := strictjson.Decode(data, v, strictjson.FieldsOfType(reflect.TypeOf(v)), required...); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInvalidRequest, "request body is not the expected JSON object: "+err.Error())
	}
	return nil
}
