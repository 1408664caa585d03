package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

// Exit statuses of fencectl (README, "fencectl"). `fencectl run` exits with
// its command's status once the command ran; before that, with these.
const (
	exitOK      = 0 // done
	exitRefused = 1 // the gateway answered a problem with a code: nothing took effect (but MUTATION_UNKNOWN and INTERNAL, exit 3)
	exitUsage   = 2 // a mistake on the command line; nothing was sent
	exitUnknown = 3 // no definite answer (transport error, timeout, MUTATION_UNKNOWN, INTERNAL): the request may or may not have taken effect; also a write held back, unsent, behind a segment still in doubt (doubt.go)
	exitLocal   = 4 // a failure on this machine (a file, the lease file, starting a command): nothing was sent, or only reads
	// exitNotRecorded: the request took effect (its answer is printed) but
	// the lease file could not be written: the next write must be told its
	// segment.
	exitNotRecorded = 5
)

// The codes of fencectl's own error classes, beside the gateway's (which
// are fencegate.Codes). They only ever appear in fencectl's output.
const (
	codeUsage     = "USAGE"
	codeUncertain = "UNCERTAIN"
	codeLocal     = "LOCAL"
	// codeNotRecorded: done, but the lease file was not updated (exit 5).
	codeNotRecorded = "NOT_RECORDED"
)

// hints says what to do about each code, in one line.
var hints = map[string]string{
	string(fencegate.CodeUnauthenticated):    "give a valid token with --token or FENCEGATE_TOKEN",
	string(fencegate.CodeGrantInvalid):       "the grant was refused; acquire a new lease",
	string(fencegate.CodeStatusInvalid):      "the status proof is stale or invalid; run 'fencectl status' to refresh it, then retry the same segment",
	string(fencegate.CodeEpochRevoked):       "the issuer epoch was revoked; stop, acquire a new lease and query receipts by operation ID",
	string(fencegate.CodeOwnerMismatch):      "use the token of the workload that acquired the lease",
	string(fencegate.CodeResourceMismatch):   "the target is outside the lease's resource; acquire a lease on the right resource",
	string(fencegate.CodePolicyStale):        "the policy generation moved on; acquire a new lease",
	string(fencegate.CodeStaleOwner):         "a newer owner holds this resource; stop and query receipts by operation ID",
	string(fencegate.CodeSegmentOutOfOrder):  "use the next segment number (see lastSegmentSeq in 'fencectl resource NAME')",
	string(fencegate.CodeQuarantined):        "this segment was accepted with a different payload; inspect 'fencectl quarantine' and the receipt",
	string(fencegate.CodeFenceRegression):    "the registry issued an old fence; an operator must raise the floor above the highest fence ('fencectl set-floor N')",
	string(fencegate.CodeBackendUnavailable): "the backend is unavailable; retry the same segment later",
	string(fencegate.CodeBackendConflict):    "the target changed behind the gateway's back; inspect it before going on",
	string(fencegate.CodeMutationUnknown):    "the outcome is not known yet; query 'fencectl receipts --operation ID' before sending anything new",
	string(fencegate.CodeInvalidRequest):     "check the command's arguments",
	string(fencegate.CodeResourceBusy):       "another effect on the resource has not settled; retry shortly",
	string(fencegate.CodeLeaseHeld):          "another worker holds the resource; retry after its lease ends",
	string(fencegate.CodeLeaseNotHeld):       "the lease expired or was released; acquire a new one and query receipts by operation ID",
	string(fencegate.CodeNotFound):           "check the name or ID",
	string(fencegate.CodeForbidden):          "this token may not do that: admin commands need an admin token, and moving an enforced pattern to shadow needs --break-glass",
	string(fencegate.CodeUnsupported):        "the backend cannot do this under the fencing contract",
	string(fencegate.CodeInternal):           "a fault in the gateway (check its logs); it may have taken effect: query receipts by operation ID before sending anything new",
	string(fencegate.CodeRequestIDConflict):  "this request ID was used with other parameters; resend the original parameters, or use a new request ID",
	string(fencegate.CodeStateLost):          "the registry's coordination state was lost and grants are paused; retry later (GET /v1/admin/state shows why and until when)",
	string(fencegate.CodeStillReconciling):   "the reconciler is still settling this receipt; resolve it by hand once it is overdue in GET /v1/unknown",
	string(fencegate.CodeDelegationInvalid):  "the delegation does not cover this write (revoked, another grant, another delegate, or a segment or target outside it); ask the lease owner for a new one",
	string(fencegate.CodeReceiptSettled):     "the receipt already has a final state; read it again (fencectl receipts --operation ID, or GET /v1/receipts/ID) and go by it",
	codeUsage:                                "run 'fencectl help' or 'fencectl COMMAND -h'",
	codeUncertain:                            "the request may or may not have taken effect; query receipts by operation ID, then retry with the same segment",
	codeLocal:                                "check the file or lease file named above",
	codeNotRecorded:                          "it took effect (shown above) but the lease file was not updated: fix the file's directory, and give the next write the segment named above",
}

// usageError is a mistake on the command line (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// localError is a failure on this machine: a file that cannot be read or
// written, a missing or broken lease file (exit 4).
type localError struct {
	msg string
	err error
}

func (e localError) Error() string { return e.msg }
func (e localError) Unwrap() error { return e.err }

// errorDoc is what fencectl reports about a failure; with --json it is
// printed as is, a problem+json-shaped object (RFC 9457 members type, title,
// detail, plus the gateway's code and receiptId, and fencectl's hint and
// exitCode).
type errorDoc struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Code      string `json:"code"`
	Detail    string `json:"detail"`
	ReceiptID string `json:"receiptId,omitempty"`
	Hint      string `json:"hint,omitempty"`
	ExitCode  int    `json:"exitCode"`
}

// notRecorded is a request that took effect (the gateway or registry
// answered it, and its answer was shown) whose lease file could not be
// written afterwards (exit 5): never reported as "nothing was sent".
type notRecorded struct {
	msg string
	err error
}

func (e notRecorded) Error() string { return e.msg }
func (e notRecorded) Unwrap() error { return e.err }

// describe classifies err: its code, detail and exit status.
func describe(err error) errorDoc {
	var ue usageError
	var le localError
	var nr notRecorded
	d := errorDoc{Detail: err.Error()}
	switch {
	case errors.As(err, &ue):
		d.Code, d.ExitCode = codeUsage, exitUsage
	case errors.As(err, &nr):
		d.Code, d.ExitCode = codeNotRecorded, exitNotRecorded
	case errors.As(err, &le):
		d.Code, d.ExitCode = codeLocal, exitLocal
	case client.IsUncertain(err):
		d.Code, d.ExitCode = codeUncertain, exitUnknown
	default:
		var fe *fencegate.Error
		if !errors.As(err, &fe) { // not the gateway's answer: I/O here
			d.Code, d.ExitCode = codeLocal, exitLocal
			break
		}
		d.Code, d.ExitCode = string(fe.Code), exitRefused
		d.Detail, d.ReceiptID = fe.Message, fe.ReceiptID
		if fe.Code == fencegate.CodeMutationUnknown || fe.Code == fencegate.CodeInternal {
			d.ExitCode = exitUnknown // INTERNAL implies nothing about the request: it may have taken effect
		}
	}
	// type and title as the gateway spells them (handlers.writeProblem).
	kind := "urn:fencegate:problem:"
	if d.Code == codeUsage || d.Code == codeUncertain || d.Code == codeLocal || d.Code == codeNotRecorded {
		kind = "urn:fencegate:fencectl:"
	}
	d.Type = kind + strings.ToLower(d.Code)
	d.Title = strings.ReplaceAll(strings.ToLower(d.Code), "_", " ")
	d.Hint = hints[d.Code]
	return d
}

// report prints err on w, as "error: CODE: detail" and a hint line, or with
// asJSON as one errorDoc, and returns the exit status it stands for.
func report(w io.Writer, err error, asJSON bool) int {
	d := describe(err)
	if asJSON {
		b, _ := json.Marshal(d)
		fmt.Fprintf(w, "%s\n", b)
		return d.ExitCode
	}
	detail := d.Detail
	if d.ReceiptID != "" {
		detail += " (receipt " + d.ReceiptID + ")"
	}
	fmt.Fprintf(w, "error: %s: %s\n", d.Code, detail)
	if d.Hint != "" && d.Code != codeUsage {
		fmt.Fprintf(w, "hint: %s\n", d.Hint)
	}
	return d.ExitCode
}
