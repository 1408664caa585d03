package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

// hints says what to do about each code, in one line.
var hints = map[fencegate.Code]string{
	fencegate.CodeUnauthenticated:    "give a valid token with --token or FENCEGATE_TOKEN",
	fencegate.CodeGrantInvalid:       "the grant was refused; acquire a new lease",
	fencegate.CodeStatusInvalid:      "the status proof is stale or invalid; run 'fencectl status' to refresh it, then retry the same segment",
	fencegate.CodeEpochRevoked:       "the issuer epoch was revoked; stop, acquire a new lease and query receipts by operation ID",
	fencegate.CodeOwnerMismatch:      "use the token of the workload that acquired the lease",
	fencegate.CodeResourceMismatch:   "the target is outside the lease's resource; acquire a lease on the right resource",
	fencegate.CodePolicyStale:        "the policy generation moved on; acquire a new lease",
	fencegate.CodeStaleOwner:         "a newer owner holds this resource; stop and query receipts by operation ID",
	fencegate.CodeSegmentOutOfOrder:  "use the next segment number (see lastSegmentSeq in 'fencectl resource NAME')",
	fencegate.CodeQuarantined:        "this segment was accepted with a different payload; inspect 'fencectl quarantine' and the receipt",
	fencegate.CodeFenceRegression:    "the registry issued an old fence; an operator must raise the floor above the highest fence ('fencectl set-floor N')",
	fencegate.CodeBackendUnavailable: "the backend is unavailable; retry the same segment later",
	fencegate.CodeBackendConflict:    "the target changed behind the gateway's back; inspect it before going on",
	fencegate.CodeMutationUnknown:    "the outcome is not known yet; query 'fencectl receipts --operation ID' before sending anything new",
	fencegate.CodeInvalidRequest:     "check the command's arguments",
	fencegate.CodeResourceBusy:       "another effect on the resource has not settled; retry shortly",
	fencegate.CodeLeaseHeld:          "another worker holds the resource; retry after its lease ends",
	fencegate.CodeLeaseNotHeld:       "the lease expired or was released; acquire a new one and query receipts by operation ID",
	fencegate.CodeNotFound:           "check the name or ID",
	fencegate.CodeForbidden:          "this token may not do that (admin commands need an admin token)",
	fencegate.CodeUnsupported:        "the backend cannot do this under the fencing contract",
	fencegate.CodeInternal:           "a fault in the gateway; check its logs",
	fencegate.CodeRequestIDConflict:  "this request ID was used with other parameters; resend the original parameters, or use a new request ID",
	fencegate.CodeStateLost:          "the registry's coordination state was lost and grants are paused; retry later (GET /v1/admin/state shows why and until when)",
	fencegate.CodeStillReconciling:   "the reconciler is still settling this receipt; resolve it by hand once it is overdue in GET /v1/unknown",
	fencegate.CodeDelegationInvalid:  "the delegation does not cover this write (revoked, another grant, another delegate, or a segment or target outside it); ask the lease owner for a new one",
}

const uncertainHint = "the request may or may not have taken effect; query receipts by operation ID, then retry with the same segment"

// printError prints "error: CODE: detail" and a one-line hint.
func printError(w io.Writer, err error) {
	if client.IsUncertain(err) {
		fmt.Fprintf(w, "error: UNCERTAIN: %v\nhint: %s\n", err, uncertainHint)
		return
	}
	code := fencegate.ErrorCode(err)
	detail := err.Error()
	var fe *fencegate.Error
	if errors.As(err, &fe) {
		detail = fe.Message
		if fe.ReceiptID != "" {
			detail += " (receipt " + fe.ReceiptID + ")"
		}
	}
	fmt.Fprintf(w, "error: %s: %s\n", code, detail)
	if h := hints[code]; h != "" {
		fmt.Fprintf(w, "hint: %s\n", h)
	}
}
