// Package history records what clients of the gateway observed (the invoke
// and the return of every fenced write and every read of a protected object)
// and checks the record for linearizability with porcupine
// (github.com/anishathalye/porcupine) against a fenced register per resource:
// a write with fence f may take effect only if no higher fence's write took
// effect before it, and a read returns the latest write that took effect.
//
// The deterministic simulation (internal/sim) and the chaos runs over real
// processes both record through a Recorder and call Check. Timestamps are a
// logical clock taken under the recorder's lock, so the order of events in one
// process is their real-time order; a Recorder is safe for concurrent use.
//
// Outcomes a client cannot be sure of stay open: a write answered
// MUTATION_UNKNOWN (or never answered: timeout, crash, lost connection) is
// recorded with a return after every other event, because its effect may land
// later (a reconciler resending the original request, a delayed S3 PUT).
package history

import (
	"sync"

	"github.com/anishathalye/porcupine"

	"github.com/fencegate/fencegate"
)

// Kind says what a recorded operation did.
type Kind uint8

// Operation kinds.
const (
	// Write is a fenced mutation of Key under Fence, writing Value.
	Write Kind = iota + 1
	// Read reads Key straight from the backend (not through a fence).
	Read
)

// Input is the invocation of one operation.
type Input struct {
	Kind Kind
	// Resource is the fence line; the history is checked per resource.
	Resource string
	// Key names the register inside the resource (an object key, an API route).
	Key string
	// Fence and Segment of a write.
	Fence   uint64
	Segment uint64
	// Value a write writes; it must be unique per write for the check to
	// tell writes apart (a payload digest, or fence/segment/worker).
	Value string
}

// Outcome classifies a write's answer by what it says about the register.
type Outcome uint8

// Outcomes of a write.
const (
	// OK: the write was accepted and its effect committed (2xx, not a replay).
	OK Outcome = iota + 1
	// Refused: refused before admission (authentication, binding, segment
	// order, quarantine, busy, regression): the register did not change.
	Refused
	// Stale: refused with STALE_OWNER: a higher fence had taken effect.
	Stale
	// NotApplied: admitted but its effect was not applied (BACKEND_CONFLICT,
	// BACKEND_UNAVAILABLE): the fence may have moved, the value did not.
	NotApplied
	// Unknown: MUTATION_UNKNOWN or no answer: anything up to the write
	// taking effect may have happened, at any time until the history ends.
	Unknown
	// Duplicate: a replay answered from the original receipt; nothing moved.
	Duplicate
)

var outcomeNames = map[Outcome]string{OK: "ok", Refused: "refused", Stale: "stale",
	NotApplied: "not-applied", Unknown: "unknown", Duplicate: "replay"}

func (o Outcome) String() string { return outcomeNames[o] }

// Output is the return of one operation.
type Output struct {
	// Outcome of a write.
	Outcome Outcome
	// Value a read returned ("" for a missing key).
	Value string
	// Code is the refusal's code, for the visualisation only.
	Code fencegate.Code
}

// OutcomeOf classifies a gateway answer: err as returned by the acceptance
// point (or decoded from problem+json) and replay as Fence-Replay said.
func OutcomeOf(err error, replay bool) Output {
	if err == nil {
		if replay {
			return Output{Outcome: Duplicate}
		}
		return Output{Outcome: OK}
	}
	return OutcomeOfCode(fencegate.ErrorCode(err))
}

// OutcomeOfCode classifies a refusal by its problem code. Codes that leave the
// outcome open (MUTATION_UNKNOWN, INTERNAL, anything unexpected) are Unknown.
func OutcomeOfCode(code fencegate.Code) Output {
	o := Output{Code: code}
	switch code {
	case fencegate.CodeStaleOwner:
		o.Outcome = Stale
	case fencegate.CodeBackendConflict, fencegate.CodeBackendUnavailable:
		o.Outcome = NotApplied
	case fencegate.CodeUnauthenticated, fencegate.CodeGrantInvalid, fencegate.CodeStatusInvalid,
		fencegate.CodeEpochRevoked, fencegate.CodeOwnerMismatch, fencegate.CodeResourceMismatch,
		fencegate.CodePolicyStale, fencegate.CodeSegmentOutOfOrder, fencegate.CodeQuarantined,
		fencegate.CodeFenceRegression, fencegate.CodeResourceBusy, fencegate.CodeInvalidRequest,
		fencegate.CodeUnsupported, fencegate.CodeForbidden, fencegate.CodeNotFound, fencegate.CodeDelegationInvalid:
		o.Outcome = Refused
	default: // CodeReceiptSettled too: a settle's or an operator's answer, never a write's
		o.Outcome = Unknown
	}
	return o
}

// Recorder collects operations. The zero value is ready to use.
type Recorder struct {
	mu   sync.Mutex
	now  int64
	ops  []porcupine.Operation
	done []bool
}

// Call is an invoked operation awaiting its return.
type Call struct {
	r   *Recorder
	idx int
}

// Invoke records the invocation of in by client (a small, zero-based worker
// number: porcupine draws one lane per client) and returns the handle on
// which to record the return.
func (r *Recorder) Invoke(client int, in Input) Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now++
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: r.now})
	r.done = append(r.done, false)
	return Call{r: r, idx: len(r.ops) - 1}
}

// Return records the operation's answer. A write whose outcome is Unknown
// stays open to the end of the history. Returning twice keeps the first.
func (c Call) Return(out Output) {
	r := c.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done[c.idx] {
		return
	}
	r.now++
	r.done[c.idx] = true
	r.ops[c.idx].Output = out
	r.ops[c.idx].Return = r.now
	if out.Outcome == Unknown {
		r.ops[c.idx].Return = 0 // open: closed after everything in Operations
	}
}

// Len is the number of operations recorded so far.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Operations returns the history. Operations never returned (the client
// crashed, the test ended) and Unknown writes end after every other event,
// with outcome Unknown.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]porcupine.Operation, len(r.ops))
	copy(out, r.ops)
	end := r.now
	for i := range out {
		if out[i].Return != 0 {
			continue
		}
		end++
		out[i].Return = end
		if o, ok := out[i].Output.(Output); !ok || o.Outcome != Unknown {
			out[i].Output = Output{Outcome: Unknown}
		}
	}
	return out
}
