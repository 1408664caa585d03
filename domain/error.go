package domain

import (
	"errors"
	"fmt"
	"time"
)

// Code is a stable, machine-readable error class. The set is closed: every
// error that leaves the service carries exactly one of these codes.
type Code string

// The codes of DESIGN §3, plus the few the registry and the REST surface need.
const (
	CodeUnauthenticated    Code = "UNAUTHENTICATED"
	CodeGrantInvalid       Code = "GRANT_INVALID"
	CodeStatusInvalid      Code = "STATUS_INVALID"
	CodeEpochRevoked       Code = "EPOCH_REVOKED"
	CodeOwnerMismatch      Code = "OWNER_MISMATCH"
	CodeResourceMismatch   Code = "RESOURCE_MISMATCH"
	CodePolicyStale        Code = "POLICY_STALE"
	CodeStaleOwner         Code = "STALE_OWNER"
	CodeSegmentOutOfOrder  Code = "SEGMENT_OUT_OF_ORDER"
	CodeQuarantined        Code = "QUARANTINED"
	CodeFenceRegression    Code = "FENCE_REGRESSION"
	CodeBackendUnavailable Code = "BACKEND_UNAVAILABLE"
	CodeBackendConflict    Code = "BACKEND_CONFLICT"
	CodeMutationUnknown    Code = "MUTATION_UNKNOWN"
	CodeInvalidRequest     Code = "INVALID_REQUEST"

	// CodeResourceBusy: another effect on the resource has not settled yet.
	CodeResourceBusy Code = "RESOURCE_BUSY"
	// CodeLeaseHeld: the resource is held by another live lease.
	CodeLeaseHeld Code = "LEASE_HELD"
	// CodeLeaseNotHeld: the lease expired, was released or revoked.
	CodeLeaseNotHeld Code = "LEASE_NOT_HELD"
	// CodeNotFound: the addressed lease, receipt, object or resource does not exist.
	CodeNotFound Code = "NOT_FOUND"
	// CodeForbidden: the caller is authenticated but may not use this operation.
	CodeForbidden Code = "FORBIDDEN"
	// CodeUnsupported: the backend cannot perform this operation under the fencing contract.
	CodeUnsupported Code = "UNSUPPORTED"
	// CodeInternal: a fault inside the service; nothing about the request is implied.
	CodeInternal Code = "INTERNAL"
	// CodeRequestIDConflict: the acquisition's request ID was already used by
	// the same owner with other parameters (resource, TTL, operation ID, root
	// or category); nothing was changed and the earlier lease is not returned.
	CodeRequestIDConflict Code = "REQUEST_ID_CONFLICT"
	// CodeStateLost: the registry found its coordination backend's state lost
	// or rolled back (marker missing or changed, revision gone back, fences
	// below what gateways accepted) and issues no grant until it can continue
	// above every fence any gateway has accepted; retry after Retry-After.
	CodeStateLost Code = "COORDINATION_STATE_LOST"
	// CodeStillReconciling: an operator's verdict on an UNKNOWN receipt the
	// reconciler is still settling (before the deadline, its strategy not
	// given up); nothing was changed. Resolve it once it awaits a person.
	CodeStillReconciling Code = "STILL_RECONCILING"
	// CodeDelegationInvalid: a delegated write (Fence-Delegation) or a
	// delegate's status request whose delegation does not hold: not
	// authentic, not bound to the grant presented, revoked, unknown to the
	// registry, or not covering the segment. Nothing was admitted.
	CodeDelegationInvalid Code = "DELEGATION_INVALID"
	// CodeReceiptSettled: a settle (an outcome, an operator's verdict) of a
	// receipt that already has a final state (COMMITTED, FAILED, NOT_APPLIED)
	// other than the one offered; nothing was changed. A final state never
	// changes: read the receipt again and go by it.
	CodeReceiptSettled Code = "RECEIPT_SETTLED"
)

// Codes lists every code, in a stable order.
var Codes = []Code{
	CodeUnauthenticated, CodeGrantInvalid, CodeStatusInvalid, CodeEpochRevoked,
	CodeOwnerMismatch, CodeResourceMismatch, CodePolicyStale, CodeStaleOwner,
	CodeSegmentOutOfOrder, CodeQuarantined, CodeFenceRegression, CodeBackendUnavailable,
	CodeBackendConflict, CodeMutationUnknown, CodeInvalidRequest, CodeResourceBusy,
	CodeLeaseHeld, CodeLeaseNotHeld, CodeNotFound, CodeForbidden, CodeUnsupported, CodeInternal,
	CodeRequestIDConflict, CodeStateLost, CodeStillReconciling, CodeDelegationInvalid,
	CodeReceiptSettled,
}

// Error is the only error type the domain returns. Adapters translate driver
// errors into it; handlers turn it into problem+json in one place.
type Error struct {
	Code    Code
	Message string
	// ReceiptID names the receipt the error refers to (MUTATION_UNKNOWN, QUARANTINED).
	ReceiptID string
	// Err is the underlying cause, kept for logs; never shown to callers.
	Err error
	// RetryAfter, when positive, is answered as the Retry-After header
	// (MUTATION_UNKNOWN of a receipt whose upstream asked to wait).
	RetryAfter time.Duration
}

// Error is the code and message (and the cause, for logs): "CODE: message[: cause]".
func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap exposes the cause to errors.Is / errors.As.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with the given code and message whose cause is err.
func Wrap(err error, code Code, msg string) *Error {
	return &Error{Code: code, Message: msg, Err: err}
}

// ErrorCode returns the code of the first *Error in err's chain, CodeInternal
// for any other non-nil error, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorMessage returns the caller-safe message of err: the *Error's message, or
// a generic text for errors that are not domain errors.
func ErrorMessage(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}
