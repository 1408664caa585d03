package s3

import (
	"errors"
	"fmt"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	"github.com/fencegate/fencegate"
)

// uncertain marks the cause of a mutation that may have been applied.
type uncertain struct{ err error }

func (u *uncertain) Error() string { return "outcome unknown: " + u.err.Error() }
func (u *uncertain) Unwrap() error { return u.err }

// refusedOnce reports whether err is a definite refusal (a 4xx answer other
// than a failed condition or a conflict, which callers reconcile) of a
// mutation sent exactly once: attempts counts the HTTP requests sent for it
// (the SDK's retries and retryConflict's included). A refusal that followed
// an attempt without a definite answer proves nothing about that attempt.
func refusedOnce(err error, attempts int32) bool {
	st, _ := status(err)
	return attempts == 1 && st >= 400 && st < 500 && !isPrecondition(err) && !isConflict(err) && !missingKey(err)
}

// notApplied marks err as a proof that nothing was applied
// (fencegate.ErrNotApplied), keeping err's own cause and status.
func notApplied(err error) error { return fmt.Errorf("%w: %w", fencegate.ErrNotApplied, err) }

// IsUncertain reports whether err comes from a Put or Delete that may have been
// applied even though it failed: no answer was received (network error,
// timeout, cancellation after sending) or the store answered 5xx. A
// precondition failure or any other 4xx answer is certain: nothing was applied
// by that request.
func IsUncertain(err error) bool {
	var u *uncertain
	return errors.As(err, &u)
}

// status returns the HTTP status and the S3 error code of an SDK error
// (0 and "" when the store sent no answer).
func status(err error) (int, string) {
	code := 0
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		code = re.HTTPStatusCode()
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return code, ae.ErrorCode()
	}
	return code, ""
}

func isConflict(err error) bool {
	st, code := status(err)
	return code == "ConditionalRequestConflict" || (st == http.StatusConflict && code == "")
}

// missingKey reports a 404 NoSuchKey. S3 answers a write with If-Match on a
// missing key this way; for such a write it means the condition did not hold.
func missingKey(err error) bool {
	_, code := status(err)
	return code == "NoSuchKey"
}

// notFound reports a 404 answer, or an error code naming a missing object.
func notFound(st int, code string) bool {
	return st == http.StatusNotFound || code == "NoSuchKey" || code == "NotFound"
}

func isPrecondition(err error) bool {
	st, code := status(err)
	return st == http.StatusPreconditionFailed || code == "PreconditionFailed"
}

// translate turns an SDK error into a *fencegate.Error. A 412 means
// another writer moved the object: the cause is ErrPreconditionFailed. A 409
// ConditionalRequestConflict that persisted through the retries does not:
// S3 answers it while another conditional write to the key is in progress
// ("try again", AWS's conditional-writes documentation), and that write
// may be this one's own earlier attempt whose answer was lost, which may
// still land; a mutation's outcome is then unknown (the reconciler settles
// it from the object's metadata after the write's expiry). NOT_FOUND answers
// reads only: a 404 to a mutation (NoSuchUpload, or NoSuchKey to a write
// without If-Match) is no definite answer unless it proves not applied.
func (s *Store) translate(err error, op, key string, mutation bool) error {
	st, code := status(err)
	what := fmt.Sprintf("store %q: %s %q", s.name, op, key)
	switch {
	case isPrecondition(err):
		return s.precondition(err, op, key)
	case isConflict(err):
		if mutation {
			err = &uncertain{err}
		}
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, what+": a conflicting conditional write to the key stayed in progress: no definite answer")
	case code == "NoSuchBucket":
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, what+": bucket does not exist")
	case code == "NoSuchUpload" || (mutation && notFound(st, code)):
		// A write's 404 says nothing about the object (the one that does,
		// If-Match on a missing key, is the caller's failed precondition),
		// and a multipart upload's NoSuchUpload is no missing object: a
		// CompleteMultipartUpload retried after its answer was lost meets
		// it when its first attempt completed the upload.
		if mutation && !errors.Is(err, fencegate.ErrNotApplied) { // not refused on its only attempt (refusedOnce)
			return fencegate.Wrap(&uncertain{err}, fencegate.CodeBackendUnavailable, what+": no definite answer ("+code+")")
		}
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, what+": refused ("+code+")")
	case notFound(st, code):
		return fencegate.Wrap(err, fencegate.CodeNotFound, what+": not found")
	case st == http.StatusNotImplemented || code == "NotImplemented":
		return fencegate.Wrap(err, fencegate.CodeUnsupported, what+": not implemented by the store")
	case code == "MetadataTooLarge" || code == "EntityTooLarge" || code == "KeyTooLongError":
		// The request itself is refused, whenever it is sent: no retry helps.
		return fencegate.Wrap(err, fencegate.CodeInvalidRequest, what+": refused as too large ("+code+")")
	case st >= 400 && st < 500:
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, what+": refused")
	}
	if mutation {
		err = &uncertain{err}
	}
	return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, what+": no definite answer")
}

// precondition returns the error for a condition that did not hold.
func (s *Store) precondition(cause error, op, key string) error {
	return fencegate.Wrap(fmt.Errorf("%w: %w", fencegate.ErrPreconditionFailed, cause),
		fencegate.CodeBackendConflict, fmt.Sprintf("store %q: %s %q: precondition failed", s.name, op, key))
}
