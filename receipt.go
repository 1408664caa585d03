package fencegate

import "time"

// ReceiptState is where an admitted effect stands.
// PENDING -> COMMITTED | FAILED | UNKNOWN; UNKNOWN -> COMMITTED | NOT_APPLIED | FAILED.
type ReceiptState string

// Receipt states.
const (
	// ReceiptPending: admitted, effect in flight.
	ReceiptPending ReceiptState = "PENDING"
	// ReceiptCommitted: the effect happened; Version/Response describe it.
	ReceiptCommitted ReceiptState = "COMMITTED"
	// ReceiptFailed: the backend refused the effect; it did not happen.
	ReceiptFailed ReceiptState = "FAILED"
	// ReceiptUnknown: the outcome is not known; the reconciler must settle it.
	ReceiptUnknown ReceiptState = "UNKNOWN"
	// ReceiptNotApplied: reconciliation proved the effect did not happen.
	ReceiptNotApplied ReceiptState = "NOT_APPLIED"
)

// Terminal reports whether s is a final state.
func (s ReceiptState) Terminal() bool {
	return s == ReceiptCommitted || s == ReceiptFailed || s == ReceiptNotApplied
}

// NotApplied reports whether s frees its segment number for a retry: the effect
// is known not to have happened.
func (s ReceiptState) NotApplied() bool {
	return s == ReceiptFailed || s == ReceiptNotApplied
}

// CanSettle reports whether a receipt in state from may move to state to.
func CanSettle(from, to ReceiptState) bool {
	switch from {
	case ReceiptPending:
		return to == ReceiptCommitted || to == ReceiptFailed || to == ReceiptUnknown || to == ReceiptNotApplied
	case ReceiptUnknown:
		return to == ReceiptCommitted || to == ReceiptFailed || to == ReceiptNotApplied
	}
	return false
}

// EffectResponse is the first answer of an upstream API, kept so that replays
// return it without calling upstream again.
type EffectResponse struct {
	Status int               `json:"status"`
	Header map[string]string `json:"header,omitempty"`
	Body   []byte            `json:"body,omitempty"`
}

// Receipt records one admitted segment and, once settled, its effect. The
// receipt, the segment number and the fence move in the same store transaction.
type Receipt struct {
	ID            string       `json:"receiptId"`
	Resource      string       `json:"resource"`
	Target        string       `json:"target"`
	Method        string       `json:"method"`
	FenceToken    uint64       `json:"fenceToken"`
	Segment       uint64       `json:"segment"`
	OperationID   string       `json:"operationId"`
	OperationRoot string       `json:"operationRoot"`
	Lease         string       `json:"lease"`
	Owner         string       `json:"owner"`
	GrantDigest   string       `json:"grantDigest"`
	PayloadDigest string       `json:"payloadDigest"`
	State         ReceiptState `json:"state"`
	// Version is the backend's version token (ETag) after a committed object write.
	Version string `json:"version,omitempty"`
	// Response is the stored upstream answer of an API effect.
	Response *EffectResponse `json:"response,omitempty"`
	// Error explains a FAILED or UNKNOWN receipt.
	Error     string     `json:"error,omitempty"`
	CreatedAt time.Time  `json:"createdAt"`
	SettledAt *time.Time `json:"settledAt,omitempty"`
}

// Quarantine records a segment that was replayed with a different payload than
// the one accepted. Nothing was forwarded; the record is kept for inspection.
type Quarantine struct {
	Resource      string    `json:"resource"`
	FenceToken    uint64    `json:"fenceToken"`
	Segment       uint64    `json:"segment"`
	ReceiptID     string    `json:"receiptId"`
	PayloadDigest string    `json:"payloadDigest"`
	Owner         string    `json:"owner"`
	At            time.Time `json:"at"`
}
