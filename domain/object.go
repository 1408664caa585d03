package domain

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"
)

// ErrPreconditionFailed is the cause (errors.Is) of an object-store error whose
// condition (If-Match / If-None-Match) did not hold: the object moved.
var ErrPreconditionFailed = errors.New("precondition failed")

// ErrNotApplied is the cause (errors.Is) of an object-store Put or Delete
// error that proves nothing of the write was applied: it was never sent (its
// landing deadline had passed), or the store's one and only attempt was
// answered with a definite refusal (a 4xx other than a failed condition).
// A store never wraps it around a timeout, a 5xx, a lost answer, or a
// refusal that followed an attempt without a definite answer (an SDK retry).
var ErrNotApplied = errors.New("not applied")

// EffectMeta describes the effect that produced an object; backends keep it
// with the object so that the object describes itself.
type EffectMeta struct {
	FenceToken    uint64
	Segment       uint64
	Root          string
	OperationID   string
	PayloadDigest string
	ReceiptID     string
}

// Metadata keys under which EffectMeta is stored with an object.
const (
	MetaFence       = "fence-token"
	MetaSegment     = "fence-segment"
	MetaRoot        = "fence-root"
	MetaOperationID = "fence-operation-id"
	MetaPayload     = "fence-payload-digest"
	MetaReceipt     = "fence-receipt-id"
)

// Map renders m as object metadata.
func (m EffectMeta) Map() map[string]string {
	return map[string]string{
		MetaFence:       strconv.FormatUint(m.FenceToken, 10),
		MetaSegment:     strconv.FormatUint(m.Segment, 10),
		MetaRoot:        m.Root,
		MetaOperationID: m.OperationID,
		MetaPayload:     m.PayloadDigest,
		MetaReceipt:     m.ReceiptID,
	}
}

// MaxContentType is the longest Content-Type a write may carry: it is kept
// with the object (S3's Content-Type, the local store's trailer), and a
// store that refused it after the write was admitted (versitygw answers a
// 4 KiB one 500) would leave a receipt in doubt. A media type's names are at
// most 127 characters each (RFC 6838 §4.2); the rest is room for parameters.
const MaxContentType = 1024

// CheckContentType accepts a write's Content-Type: at most MaxContentType
// bytes of visible ASCII, spaces and tabs (RFC 9110 §5.5 field values,
// without obsolete text). Anything else is INVALID_REQUEST before the write
// is admitted.
func CheckContentType(v string) error {
	if len(v) > MaxContentType {
		return Errorf(CodeInvalidRequest, "Content-Type of %d bytes is over %d", len(v), MaxContentType)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' || c > '~') && c != '\t' {
			return Errorf(CodeInvalidRequest, "Content-Type must be visible ASCII, spaces and tabs")
		}
	}
	return nil
}

// CheckContentTypeLines accepts the Content-Type field lines of a write: none,
// or one that CheckContentType accepts. Content-Type is a singleton field,
// not a list (RFC 9110 §8.3, §5.3), so two lines are INVALID_REQUEST: read
// as the first or joined with commas, one front door or proxy would keep
// another type than the next.
func CheckContentTypeLines(lines []string) error {
	switch len(lines) {
	case 0:
		return nil
	case 1:
		return CheckContentType(lines[0])
	}
	return Errorf(CodeInvalidRequest, "Content-Type is given %d times; send one", len(lines))
}

// MaxEffectMetaSize is the most bytes of names and values EffectMeta.Map
// takes: a fence and a segment of 20 digits, a root and an operation ID of
// 256 bytes (the registry's bound on operation fields), a sha256 payload
// digest and a receipt ID of 64 bytes. A store that bounds metadata (S3: 2
// KB of user metadata) leaves a client's own metadata the rest.
const MaxEffectMetaSize = len(MetaFence) + 20 + len(MetaSegment) + 20 + len(MetaRoot) + 256 +
	len(MetaOperationID) + 256 + len(MetaPayload) + len("sha256:") + 64 + len(MetaReceipt) + 64

// ParseEffectMeta reads EffectMeta back from object metadata. ok is false when
// the object carries no fence metadata (it was not written by a gateway).
func ParseEffectMeta(md map[string]string) (m EffectMeta, ok bool) {
	f, err1 := strconv.ParseUint(md[MetaFence], 10, 64)
	s, err2 := strconv.ParseUint(md[MetaSegment], 10, 64)
	if err1 != nil || err2 != nil || md[MetaReceipt] == "" {
		return EffectMeta{}, false
	}
	return EffectMeta{FenceToken: f, Segment: s, Root: md[MetaRoot], OperationID: md[MetaOperationID],
		PayloadDigest: md[MetaPayload], ReceiptID: md[MetaReceipt]}, true
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key         string
	ETag        string
	Size        int64
	ContentType string
	Metadata    map[string]string
	// LastModified is when the object was last written (zero if unknown).
	LastModified time.Time
}

// ObjectLister is the optional capability (found by type assertion) of an
// ObjectStore to list its keys, which the S3 front door's ListObjects needs.
// The gateway's own scratch keys (the start-up probe's) are not listed.
type ObjectLister interface {
	// List returns at most limit objects whose keys start with prefix and
	// sort after after (byte order; "" for from the start), in ascending
	// key order, and whether more follow.
	List(ctx context.Context, prefix, after string, limit int) (objects []ObjectInfo, more bool, err error)
}

// ObjectStager is the optional capability (found by type assertion) of an
// ObjectStore to make a put's bytes durable before the put's condition is
// known, so that their sync can run while the gateway's admission of the
// write commits. Staging changes no object: what Stage wrote is not any
// object's, no read sees it, and a crash leaves nothing an object refers
// to. The write is applied, or not, only by the StagedPut's Put, after the
// admission is durable, so the fencing order (admission, then effect) holds.
type ObjectStager interface {
	// Stage reads req's body and makes it durable with req's key, content
	// type and metadata. req's condition is not looked at (the StagedPut's
	// Put brings it); everything else is validated as Put validates it.
	Stage(ctx context.Context, req PutRequest) (StagedPut, error)
}

// StagedPut is a put whose bytes a stager holds ready. Exactly one of Put
// and Discard should be called; a second call of either does nothing (Put
// then fails with CodeInternal).
type StagedPut interface {
	// Put applies the staged write if the condition holds (exactly one of
	// ifMatch != "" and ifNoneMatch), with the contract of ObjectStore.Put
	// for a request of the staged bytes and metadata: atomic, checked
	// against the object as it is now, refused past ctx's landing deadline.
	Put(ctx context.Context, ifMatch string, ifNoneMatch bool) (etag string, err error)
	// Discard gives the staged bytes up; no object changes.
	Discard()
}

// PutRequest is a conditional object write: exactly one of IfMatch != "" or
// IfNoneMatch must be set.
type PutRequest struct {
	Key         string
	Body        io.ReadSeeker
	Size        int64
	ContentType string
	IfMatch     string
	IfNoneMatch bool
	Meta        EffectMeta
	// UserMeta is the client's own metadata (S3 x-amz-meta-*: lower-case
	// names without the prefix), kept with the object beside Meta; names
	// starting with "fence-" are Meta's and are dropped from it.
	UserMeta map[string]string
}

// Metadata is what a backend stores with the object: UserMeta, then Meta
// (which no user name can override).
func (req PutRequest) Metadata() map[string]string {
	m := req.Meta.Map()
	for k, v := range req.UserMeta {
		if k = strings.ToLower(k); !strings.HasPrefix(k, "fence-") {
			m[k] = v
		}
	}
	return m
}

// MaxUserMetaSize is what a client's own metadata (names and values) may
// take: S3's bound on user metadata (2 KB) less the most the gateway's
// fence metadata takes beside it (MaxEffectMetaSize).
const MaxUserMetaSize = 2<<10 - MaxEffectMetaSize

// Validate checks what every backend requires of a put: a canonical key, a
// Content-Type it can keep (CheckContentType), user metadata within
// MaxUserMetaSize, exactly one condition, and a body size that fits the
// body. So what a store keeps beside the bytes stays small whatever its
// encoding (the local store's trailer, S3's headers).
func (req PutRequest) Validate() error {
	if err := CheckName(req.Key); err != nil {
		return err
	}
	if err := CheckContentType(req.ContentType); err != nil {
		return err
	}
	n := 0
	for k, v := range req.UserMeta {
		n += len(k) + len(v)
	}
	if n > MaxUserMetaSize {
		return Errorf(CodeInvalidRequest, "put of %q: user metadata of %d bytes is over %d", req.Key, n, MaxUserMetaSize)
	}
	if (req.IfMatch != "") == req.IfNoneMatch {
		return Errorf(CodeInvalidRequest, "put of %q needs exactly one of If-Match and If-None-Match", req.Key)
	}
	if req.Size < 0 || (req.Body == nil && req.Size != 0) {
		return Errorf(CodeInvalidRequest, "put of %q: bad body size %d", req.Key, req.Size)
	}
	return nil
}

type landByKey struct{}

// WithLandBy returns a context whose object writes (Put, Delete) carry a
// landing deadline: the store refuses such a request once it reaches the
// store at or after t (plus at most LandBySlack), so a request held in the
// network past it never lands.
// The gateway sets it for every effect (gateway.EffectExpiry) and the
// reconciler takes a write for not applied only after it (plus its grace).
// It is a deadline the request itself carries to the store, as an S3
// presigned request's X-Amz-Date + X-Amz-Expires does.
func WithLandBy(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, landByKey{}, t)
}

// LandBySlack is how long after its landing deadline a store may still
// accept a request: SigV4 presigned requests have whole seconds
// (X-Amz-Date, X-Amz-Expires), so an S3 store rounds the deadline up by less
// than this. Whoever relies on the deadline waits this much longer.
const LandBySlack = time.Second

// LandBy is the landing deadline WithLandBy put in ctx; ok is false when
// there is none (the request may land whenever it arrives).
func LandBy(ctx context.Context) (t time.Time, ok bool) {
	t, ok = ctx.Value(landByKey{}).(time.Time)
	return t, ok
}

// ObjectStore is an object backend that keeps the fencing contract: writes are
// conditional and atomic, metadata is stored with the object, and a failed
// condition returns an error whose cause is ErrPreconditionFailed. A Put or
// Delete whose context carries a landing deadline (LandBy) is refused without
// being applied when it reaches the store at or after that deadline (plus at
// most LandBySlack).
type ObjectStore interface {
	// Name is the store's configured name (the first segment of its resources).
	Name() string
	// Put writes the object if the condition holds and returns its new ETag.
	Put(ctx context.Context, req PutRequest) (etag string, err error)
	// Delete removes the object if its ETag equals ifMatch. On a missing
	// key the condition does not hold: it fails with cause
	// ErrPreconditionFailed, or (S3 stores differ) does nothing and
	// succeeds; never NOT_FOUND.
	Delete(ctx context.Context, key, ifMatch string) error
	// Get opens the object. NOT_FOUND if it does not exist.
	Get(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error)
	// Head describes the object. NOT_FOUND if it does not exist.
	Head(ctx context.Context, key string) (ObjectInfo, error)
}
