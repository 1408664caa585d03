package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ReceiptState is where an admitted effect stands.
// PENDING -> COMMITTED | FAILED | UNKNOWN; UNKNOWN -> COMMITTED | NOT_APPLIED | FAILED,
// or UNKNOWN again to record another attempt (a resend that settled nothing).
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
		return to == ReceiptCommitted || to == ReceiptFailed || to == ReceiptNotApplied || to == ReceiptUnknown
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

// Bounds of an EffectRequest kept with a receipt.
const (
	// MaxEffectRequestBody is the largest request body a receipt keeps.
	MaxEffectRequestBody = 1 << 20
	// MaxEffectRequestHeader bounds the kept header names and values together.
	MaxEffectRequestHeader = 64 << 10
)

// EffectRequest is the exact upstream request of an API effect as the gateway
// sends it: method, path (with query) relative to the API's base URL, the
// headers the API declares (the idempotency key among them, never the
// upstream credential, which is added per attempt) and the body (the key
// inside it when the API wants it there). It is kept with the receipt so that
// an unknown outcome can be settled by resending the very same request under
// the same key.
type EffectRequest struct {
	Method string              `json:"method"`
	Path   string              `json:"path"`
	Header map[string][]string `json:"header,omitempty"`
	Body   []byte              `json:"body,omitempty"`
	// Key is the idempotency key the request carries ("" for none).
	Key string `json:"key,omitempty"`
}

// Validate checks that r has a method and a path starting with "/", fits
// MaxEffectRequestBody and MaxEffectRequestHeader, and that its method,
// path, key and headers are UTF-8 without NUL (kept as text, they must come
// back as sent).
func (r *EffectRequest) Validate() error {
	if r.Method == "" || len(r.Path) == 0 || r.Path[0] != '/' {
		return Errorf(CodeInvalidRequest, "a kept request needs a method and a path starting with /")
	}
	if len(r.Body) > MaxEffectRequestBody {
		return Errorf(CodeInvalidRequest, "request body of %d bytes is over the %d a receipt keeps", len(r.Body), MaxEffectRequestBody)
	}
	n := len(r.Key)
	for k, vs := range r.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	if n > MaxEffectRequestHeader {
		return Errorf(CodeInvalidRequest, "request headers of %d bytes are over the %d a receipt keeps", n, MaxEffectRequestHeader)
	}
	// A receipt keeps the request as text (JSON in a database column), which
	// would replace bytes that are not UTF-8 (encoding/json writes U+FFFD):
	// a resend read back from the store would then send other headers under
	// the same idempotency key. The body is kept as bytes and may be anything.
	// Nor can it keep a NUL, which PostgreSQL's text and jsonb refuse
	// ("\u0000 cannot be converted to text"): every store keeps the same
	// requests.
	if !KeptText(r.Method) || !KeptText(r.Path) || !KeptText(r.Key) {
		return Errorf(CodeInvalidRequest, "a kept request's method, path and key must be UTF-8 without NUL")
	}
	for k, vs := range r.Header {
		if !KeptText(k) {
			return Errorf(CodeInvalidRequest, "a kept request's header names must be UTF-8 without NUL")
		}
		for _, v := range vs {
			if !KeptText(v) {
				return Errorf(CodeInvalidRequest, "the %s header's value is not UTF-8 without NUL, which a receipt cannot keep verbatim", k)
			}
		}
	}
	return nil
}

// ShadowReceiptPrefix begins the ID of every receipt a gateway answers for
// a write shadow mode forwarded although it refused it: such a receipt is
// not stored, and no segment was admitted for it.
const ShadowReceiptPrefix = "shadow_"

// IsShadowReceipt reports whether receiptID is such a receipt's
// (ShadowReceiptPrefix).
func IsShadowReceipt(receiptID string) bool { return strings.HasPrefix(receiptID, ShadowReceiptPrefix) }

// KeptText reports whether s can be kept as text by every store as it
// came: UTF-8 without NUL (PostgreSQL's text refuses NUL).
func KeptText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// MaxEffectKey is the longest EffectKey (Stripe's limit for its own
// idempotency keys, the longest of the APIs fronted).
const MaxEffectKey = 255

// CheckEffectKey accepts "" or up to MaxEffectKey visible ASCII characters.
func CheckEffectKey(k string) error {
	if len(k) > MaxEffectKey {
		return Errorf(CodeInvalidRequest, "effect key of %d characters is over %d", len(k), MaxEffectKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] <= ' ' || k[i] > '~' {
			return Errorf(CodeInvalidRequest, "effect key must be visible ASCII without spaces")
		}
	}
	return nil
}

// Receipt records one admitted segment and, once settled, its effect. The
// receipt, the segment number and the fence move in the same store transaction.
type Receipt struct {
	ID            string `json:"receiptId"`
	Resource      string `json:"resource"`
	Target        string `json:"target"`
	Method        string `json:"method"`
	FenceToken    uint64 `json:"fenceToken"`
	Segment       uint64 `json:"segment"`
	OperationID   string `json:"operationId"`
	OperationRoot string `json:"operationRoot"`
	Lease         string `json:"lease"`
	// Owner is the grant's owner, the identity that holds the lease; the
	// write itself was made by Delegate when that is set.
	Owner string `json:"owner"`
	// Delegate is the workload identity that made a delegated write (the
	// delegate its Fence-Delegation names, which the gateway checked is the
	// caller) and DelegationID that delegation's ID; both are "" for the
	// owner's own writes. They are recorded at admission and never change.
	// They are not part of the segment's identity: the same segment again
	// with the same payload is a replay answering this receipt, whether the
	// owner or a delegate sends it.
	Delegate      string `json:"delegate,omitempty"`
	DelegationID  string `json:"delegationId,omitempty"`
	GrantDigest   string `json:"grantDigest"`
	PayloadDigest string `json:"payloadDigest"`
	// EffectKey is the worker's own key for this effect (the Fence-Effect-Key
	// header, for example an SDK's idempotency key), "" for none. It is part of
	// the segment's identity (a replay under another key is QUARANTINED) and
	// lets a recovering worker find the effect by operation ID.
	EffectKey string       `json:"effectKey,omitempty"`
	State     ReceiptState `json:"state"`
	// Version is the backend's version token (ETag) after a committed object write.
	Version string `json:"version,omitempty"`
	// Response is the stored upstream answer of an API effect.
	Response *EffectResponse `json:"response,omitempty"`
	// Request is the exact upstream request of an API effect (nil for objects).
	Request *EffectRequest `json:"request,omitempty"`
	// Attempts counts the upstream sends made for an API effect.
	Attempts int `json:"attempts,omitempty"`
	// Resend is set on an UNKNOWN receipt whose last attempt ended where the
	// API's contract allows resending Request under the same key (no answer,
	// an in-progress answer, a 5xx declared safe to resend).
	Resend bool `json:"resend,omitempty"`
	// RetryAt, on an UNKNOWN receipt whose last upstream answer asked to wait
	// (an in-progress answer's Retry-After, capped at MaxRetryAfter), is the
	// moment before which no resend is made: replays answer MUTATION_UNKNOWN
	// with Retry-After until then, on every replica.
	RetryAt *time.Time `json:"retryAt,omitempty"`
	// Error explains a FAILED or UNKNOWN receipt.
	Error     string     `json:"error,omitempty"`
	CreatedAt time.Time  `json:"createdAt"`
	SettledAt *time.Time `json:"settledAt,omitempty"`
	// LandBy is when every request of the effect expires at the store, the
	// deadline it was sent with (CreatedAt plus the admitting gateway's
	// effectTimeout); zero for a receipt admitted without one (before it
	// was recorded), which a gateway reconciles by its own effectTimeout.
	LandBy time.Time `json:"landBy,omitzero"`
}

// MaxRetryAfter caps an upstream's Retry-After kept in Receipt.RetryAt.
const MaxRetryAfter = 10 * time.Minute

// Quarantine records a segment that came again with another payload (or
// target, method or effect key) than the one accepted. Nothing was forwarded;
// the record is kept for inspection beside the accepted receipt. There is one
// record per distinct refused request: the same one again only counts another
// attempt, whoever sends it. The payload itself is kept when it fits the
// gateway's bound (see MaxQuarantinePayload); a larger one keeps only its
// digest and size.
type Quarantine struct {
	// ID names the record; it is derived from what makes it distinct
	// (QuarantineID), so the same refused request always has the same ID.
	ID         string `json:"quarantineId"`
	Resource   string `json:"resource"`
	FenceToken uint64 `json:"fenceToken"`
	Segment    uint64 `json:"segment"`
	Target     string `json:"target"`
	Method     string `json:"method"`
	EffectKey  string `json:"effectKey,omitempty"`
	// ReceiptID is the receipt accepted for the segment.
	ReceiptID     string `json:"receiptId"`
	PayloadDigest string `json:"payloadDigest"`
	PayloadSize   int64  `json:"payloadSize"`
	// PayloadKept tells whether Payload holds the refused payload.
	PayloadKept bool   `json:"payloadKept"`
	Payload     []byte `json:"payload,omitempty"`
	// Owner is the grant's owner, the identity that holds the lease; the
	// refused request's first attempt was sent by Delegate when that is set.
	Owner string `json:"owner"`
	// Delegate is the workload identity that sent the refused request the
	// first time, when it was a delegated write (the delegate its
	// Fence-Delegation names, which the gateway checked is the caller), and
	// DelegationID that delegation's ID; both are "" when the owner sent it,
	// and on records written before they were recorded (or by a binary that
	// did not record them), which therefore read as the owner's.
	// Like At and the payload they describe the first attempt and never
	// change: a repeat only moves Attempts and LastAt, whoever sends it (the
	// gateway's refusal log line names each attempt's caller, rate-limited
	// per caller). They are not part of the record's identity (QuarantineID).
	Delegate     string `json:"delegate,omitempty"`
	DelegationID string `json:"delegationId,omitempty"`
	// At is when the refused request first came, LastAt when it last did.
	At       time.Time `json:"at"`
	LastAt   time.Time `json:"lastAt"`
	Attempts int       `json:"attempts"`
}

// MaxQuarantinePayload is the largest payload a quarantine record keeps,
// whatever the gateway is configured with; DefaultQuarantinePayload is the
// gateway's bound unless configured.
const (
	MaxQuarantinePayload     = 1 << 20
	DefaultQuarantinePayload = 64 << 10
)

// QuarantineID is the ID of the quarantine record of a refused request: a
// digest of resource, fence, segment, target, method, effect key and payload
// digest.
func QuarantineID(resource string, fence, segment uint64, target, method, effectKey, payloadDigest string) string {
	h := sha256.New()
	for _, part := range []string{resource, strconv.FormatUint(fence, 10), strconv.FormatUint(segment, 10), target, method, effectKey, payloadDigest} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "q_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// ApproxSize is roughly how many bytes q takes in a JSON answer.
func (q *Quarantine) ApproxSize() int {
	return 500 + len(q.ID) + len(q.Resource) + len(q.Target) + len(q.EffectKey) + len(q.ReceiptID) +
		len(q.PayloadDigest) + len(q.Owner) + len(q.Delegate) + len(q.DelegationID) + len(q.Payload)*4/3
}

// Expiry is when every request of r's effect expires at the store or API:
// its LandBy, the deadline the admitting gateway sent it with; for a
// receipt admitted without one, effectTimeout (the caller's) after its
// creation. Every rule that waits for an effect to be over counts from it.
func (r Receipt) Expiry(effectTimeout time.Duration) time.Time {
	if !r.LandBy.IsZero() {
		return r.LandBy
	}
	return r.CreatedAt.Add(effectTimeout)
}
