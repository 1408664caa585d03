package domain

import (
	"context"
	"time"
)

// ResourceState is the fence state of one resource. HighestFence never decreases.
type ResourceState struct {
	Resource       string `json:"resource"`
	HighestFence   uint64 `json:"highestFence"`
	Root           string `json:"root"`
	Lease          string `json:"lease"`
	LastSegmentSeq uint64 `json:"lastSegmentSeq"`
	// GrantIssuedAt is the issuedAt (ms) of the grant that set HighestFence.
	GrantIssuedAt int64 `json:"grantIssuedAt"`
	// PendingReceipt names the effect in flight (PENDING or UNKNOWN), if any.
	PendingReceipt string    `json:"pendingReceipt,omitempty"`
	UpdatedAt      time.Time `json:"updatedAt"`
}

// AdmitRequest asks a store to admit one segment of a verified grant.
type AdmitRequest struct {
	Grant         VerifiedGrant
	Segment       uint64
	Target        string
	Method        string
	PayloadDigest string
	// EffectKey is the worker's own key for the effect ("" for none); it
	// must pass CheckEffectKey and is kept in the receipt.
	EffectKey string
	// Delegate and DelegationID, for a delegated write, are the delegate
	// that made it (the caller, checked against the delegation) and the
	// delegation's ID; both "" for the grant owner's own write. They must be
	// set together, as UTF-8 without NUL, and are kept in the receipt (not
	// part of the segment's identity: see Receipt.Delegate) or, when the
	// request is QUARANTINED, in the new quarantine record (not in one it
	// only counts another attempt on: see Quarantine.Delegate).
	Delegate     string
	DelegationID string
	// ReceiptID is the ID the new receipt gets if the segment is admitted.
	ReceiptID string
	// Request, for an API effect, is the exact upstream request the receipt
	// keeps (nil for none); it must pass EffectRequest.Validate.
	Request *EffectRequest
	// PayloadSize is the payload's length in bytes, kept if the segment is
	// quarantined.
	PayloadSize int64
	// QuarantinePayload, if set, returns the payload to keep if the segment
	// is quarantined (nil when it is over the gateway's bound). Stores call it
	// only then, and keep nothing of a payload over MaxQuarantinePayload or
	// one it failed to return: the record keeps the digest and size.
	QuarantinePayload func() ([]byte, error) `json:"-"`
	Now               time.Time
	// EffectTimeout, when positive, is how long after Now the effect's
	// requests may still land (the gateway's effectTimeout): the receipt
	// keeps Now + EffectTimeout as its LandBy, so that every replica, and
	// this one after a restart with another effectTimeout, reconciles the
	// effect by the deadline it was sent with. Zero records none.
	EffectTimeout time.Duration
	// Prior, when set, is a settle of an earlier receipt folded into this
	// admission's transaction (the gateway's deferred settle): a store that
	// implements PriorSettling applies it first, exactly as
	// Settle(Prior.ReceiptID, Prior.Outcome) would, and then decides the
	// segment on the state that settle left, so both share one durable
	// commit. The settle commits even when the segment is refused; its own
	// answer is Admission.Prior / Admission.PriorErr. A store that does not
	// implement PriorSettling must not be given one.
	Prior *PriorSettle
}

// PriorSettle is a settle folded into an admission (AdmitRequest.Prior).
type PriorSettle struct {
	ReceiptID string
	Outcome   Outcome
}

// PriorSettling is implemented by a FenceStore whose Admit honours
// AdmitRequest.Prior. When Admit returns a verdict (nil, or a ruling such as
// STALE_OWNER or RESOURCE_BUSY), the prior settle has been decided in the
// same committed transaction and Admission.Prior or Admission.PriorErr says
// how; when Admit fails without a verdict (a store fault, a lost COMMIT
// answer), the prior settle's fate is as open as the admission's. So is it
// after a refusal of the request as malformed (INVALID_REQUEST), which need
// answer neither: a store refuses a request of the wrong shape before it
// reads anything, and a value the database refuses rolls the transaction
// back (storetest's PriorIsDecidedOnlyWithAVerdict: applied whole or not at
// all).
type PriorSettling interface {
	FenceStore
	// SettlesPrior reports that Admit honours AdmitRequest.Prior.
	SettlesPrior() bool
}

// Admission is the result of an admitted (or replayed) segment.
type Admission struct {
	Receipt Receipt
	// Replay: the segment was already accepted with the same payload; Receipt is
	// the original and nothing must be forwarded.
	Replay bool
	// PreviousVersion is the backend version last committed for Receipt.Target
	// ("" if none), to chain a conditional write on.
	PreviousVersion string
	// Prior is AdmitRequest.Prior's receipt as that settle left it, or
	// PriorErr its refusal (a ruling, e.g. RECEIPT_SETTLED); both are set
	// whether or not the segment was admitted (see PriorSettling). Admit
	// returns the Admission alongside a refusal of the segment when a prior
	// settle was given, so the caller learns the settle's answer.
	Prior    *Receipt
	PriorErr error `json:"-"`
}

// Outcome settles a receipt.
type Outcome struct {
	State    ReceiptState
	Version  string
	Response *EffectResponse
	Error    string
	// Attempts is the number of upstream sends this outcome adds to the receipt.
	Attempts int
	// Resend (UNKNOWN only) records that the API allows resending the kept
	// request under the same key.
	Resend bool
	// RetryAfter (UNKNOWN only) is how long the upstream asked to wait
	// before the next attempt (its Retry-After); Settle keeps it as
	// Receipt.RetryAt (Now plus RetryAfter, capped at MaxRetryAfter).
	RetryAfter time.Duration
	// IfSettledAt, when not zero, is a precondition: the settle applies only
	// if the receipt's SettledAt is still this moment (nothing settled it or
	// claimed it for a resend since the caller read it), else it is
	// STILL_RECONCILING and nothing changes. An operator's verdict uses it.
	IfSettledAt time.Time
	// IfPending, when set, is a precondition: the settle applies only if
	// the receipt is still PENDING and nothing has settled or claimed it
	// since its admission (no SettledAt), else it is STILL_RECONCILING and
	// nothing changes. The gateway's NOT_APPLIED for an admission it did
	// not go on with uses it: by the time the store takes it, another
	// replica may have taken the receipt for an orphan and resent it.
	IfPending bool
	Now       time.Time
}

// FenceStore keeps fence state and receipts. Admit applies the fence rules of
// DESIGN §3 in one transaction on the resource:
//
//   - a resource with a PENDING or UNKNOWN receipt admits nothing new (RESOURCE_BUSY),
//     though rejections and replays are still answered;
//   - fence < highestFence: FENCE_REGRESSION if the grant was issued after the one
//     that set highestFence, else STALE_OWNER;
//   - fence == highestFence under another lease or root: FENCE_REGRESSION;
//   - an accepted segment again: same payload, same target and method -> Replay;
//     otherwise a Quarantine record is written (or, for the same refused
//     request again, its Attempts and LastAt move) and QUARANTINED returned;
//   - fence > highestFence: only segment 1; fence == highestFence: only
//     lastSegmentSeq+1; anything else SEGMENT_OUT_OF_ORDER.
//
// A rejected Admit changes nothing but, for QUARANTINED, the quarantine list.
// Admit keeps AdmitRequest.Request verbatim in the receipt (INVALID_REQUEST,
// nothing written, if it is over the bounds).
// Settle moves a receipt along CanSettle (UNKNOWN to UNKNOWN records another
// attempt: its error, Resend, and Attempts added); COMMITTED records Version as the
// target's latest version ("" forgets it, e.g. after a delete); FAILED and
// NOT_APPLIED give the segment number back when it is still the last one.
// Settling clears the resource's pending mark unless the new state is UNKNOWN.
type FenceStore interface {
	Admit(ctx context.Context, req AdmitRequest) (Admission, error)
	Settle(ctx context.Context, receiptID string, o Outcome) (Receipt, error)
	// Resource returns NOT_FOUND for a resource that never admitted a segment.
	Resource(ctx context.Context, resource string) (ResourceState, error)
	Receipt(ctx context.Context, id string) (Receipt, error)
	// ReceiptAt returns the live (not FAILED/NOT_APPLIED) receipt of a segment.
	ReceiptAt(ctx context.Context, resource string, fence, segment uint64) (Receipt, error)
	// The receipt lists are paged (see Page): oldest first (creation time, then
	// receipt ID), at most page.Size() receipts and about MaxPageBytes each,
	// Next naming the rest. A limit out of range or a cursor of another list
	// is INVALID_REQUEST.
	//
	// ReceiptsByOperation lists the receipts of an operation ID.
	ReceiptsByOperation(ctx context.Context, operationID string, page Page) (ReceiptPage, error)
	// ReceiptsByResource lists the receipts of a resource.
	ReceiptsByResource(ctx context.Context, resource string, page Page) (ReceiptPage, error)
	// ReceiptsByState lists the receipts in a state.
	ReceiptsByState(ctx context.Context, state ReceiptState, page Page) (ReceiptPage, error)
	// Quarantined lists quarantine records of one resource or ("") of all,
	// paged like the receipt lists, ordered by resource, first time, then ID.
	Quarantined(ctx context.Context, resource string, page Page) (QuarantinePage, error)
	// QuarantineRecord reads one quarantine record (NOT_FOUND if none).
	QuarantineRecord(ctx context.Context, id string) (Quarantine, error)
	// Version returns the backend version last committed for target, "" if none.
	Version(ctx context.Context, target string) (string, error)
	// SwapVersion records to as target's version if it is still from (""
	// meaning none; to "" forgets it), else BACKEND_CONFLICT. It serves
	// effects forwarded outside a receipt (shadow mode).
	SwapVersion(ctx context.Context, target, from, to string) error
	Close() error
}

// TargetBindings is the operator's handle on the canonical mapping's binding
// of a target to the resource that first admitted it (README, "Canonical
// mapping"). Every fence store implements it.
type TargetBindings interface {
	// Binding returns the resource target is bound to; NOT_FOUND if none.
	Binding(ctx context.Context, target string) (string, error)
	// Unbind removes target's binding in one transaction, if it is still to
	// resource (else RESOURCE_MISMATCH; NOT_FOUND if unbound) and resource
	// has no effect in flight (else RESOURCE_BUSY). The resource's fence
	// state, receipts and the target's version are kept: the next accepted
	// admission binds the target again.
	Unbind(ctx context.Context, target, resource string) error
}

// GroupCommitter is a fence store that runs concurrent writes in shared
// transactions (group commit); each store documents which writes it groups
// (at least admissions and settles). Its counters tell an operator how well
// writes share them: writes per batch is 1 while writes are rare and grows
// with concurrency. The counters only grow, from 0 when the store was
// opened; they change no behaviour.
type GroupCommitter interface {
	// GroupCommits reports the batches (groups of writes committed in one
	// transaction) run since the store was opened and the writes they
	// carried.
	GroupCommits() (batches, writes uint64)
}

// HighWater is the fence store's report of the highest fence it has accepted
// on any resource (0 when none). A registry that finds its coordination state
// lost or rolled back continues issuing strictly above it, so no new grant
// can be at or below a fence a gateway sharing this store has accepted. Every
// fence store implements it.
type HighWater interface {
	HighestFence(ctx context.Context) (uint64, error)
}

// Compactor is the fence store's retention of settled receipts and of
// quarantine records (README, "Retention"). Every fence store implements it.
type Compactor interface {
	// CompactReceipts deletes up to limit receipts that were settled
	// (COMMITTED, FAILED or NOT_APPLIED) before `before`, oldest first within
	// each state, with their index entries, and returns how many it deleted. It never deletes a
	// PENDING or UNKNOWN receipt, the receipt of a resource's last accepted
	// segment (its highest fence and last segment), nor, while the resource
	// has a receipt pending, the one of the segment before it at that fence
	// (a FAILED or NOT_APPLIED settle gives the last segment back, making
	// that one the last accepted segment again), nor a receipt that a
	// quarantine record names. Fence state, versions, bindings and quarantine
	// records are kept, so the fence rules answer as before: a compacted
	// segment's replay is refused (SEGMENT_OUT_OF_ORDER or STALE_OWNER) rather
	// than answered with its receipt, and nothing is forwarded again.
	CompactReceipts(ctx context.Context, before time.Time, limit int) (int, error)
	// CompactQuarantine deletes up to limit quarantine records whose last
	// attempt (LastAt) is before `before`, oldest LastAt first, with their
	// kept payload and index entries, and returns how many it deleted
	// (fewer than limit: none is left to delete now). A record the same
	// refused request hit again at or after `before` is kept. Deleted
	// records are gone from Quarantined and QuarantineRecord (NOT_FOUND);
	// the same refused request afterwards makes a new record. Fence state,
	// receipts, versions and bindings are unchanged, so the fence rules
	// answer as before (another payload for a segment whose receipt is still
	// there is QUARANTINED again); the receipt a deleted record named is no
	// longer kept for it, and CompactReceipts deletes it under its own rule.
	CompactQuarantine(ctx context.Context, before time.Time, limit int) (int, error)
}
