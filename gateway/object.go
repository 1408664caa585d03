package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"sort"

	"github.com/fencegate/fencegate"
)

// ObjectPayloadDigest is the payload digest of an S3 front-door object write,
// the value that tells a retry from another write (arrivalSegment, the fence
// rules' replay): the body's digest ("sha256:<hex>") when the write sets no
// content type and no user metadata, else "sha256:" and the hex SHA-256 of
// the body's digest, the content type and the metadata sorted by name, each
// length-prefixed. An S3 object is its bytes with its type and metadata
// (PutObject replaces all three), so the same bytes with another type or
// other metadata are another write, never answered as a replay of the
// first. (The REST door's digest is the body's alone: README, Known
// limitations.)
func ObjectPayloadDigest(body, contentType string, meta map[string]string) string {
	if contentType == "" && len(meta) == 0 {
		return body
	}
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("fencegate object write v1")
	field(body)
	field(contentType)
	names := make([]string, 0, len(meta))
	for k := range meta {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		field(k)
		field(meta[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// ObjectPut writes an object as a conditional write chained on the version the
// gateway last committed for the key (If-None-Match: * when there is none).
// When the condition fails it reads the object back: the receipt's own earlier
// write is COMMITTED, any other change is BACKEND_CONFLICT and nothing is
// overwritten. A refusal the store proves (fencegate.ErrNotApplied) is
// FAILED; any other error after the request may have been sent is UNKNOWN.
type ObjectPut struct {
	Store       fencegate.ObjectStore
	Key         string
	Body        io.ReadSeeker
	Size        int64
	ContentType string
	// UserMeta is the client's own object metadata (see fencegate.PutRequest).
	UserMeta map[string]string
	// staged: the write, staged for r beside its admission (stage.go); Apply
	// then only publishes it under the condition.
	staged fencegate.StagedPut
}

// Apply performs the write.
func (p ObjectPut) Apply(ctx context.Context, r fencegate.Receipt, prev string) (fencegate.Outcome, error) {
	var (
		etag string
		err  error
	)
	if p.staged != nil {
		etag, err = p.staged.Put(ctx, prev, prev == "")
	} else {
		etag, err = p.Store.Put(ctx, p.request(r, prev))
	}
	if err == nil {
		return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: etag}, nil
	}
	return objectFailure(ctx, p.Store, p.Key, r, err)
}

// request is the write of p for receipt r, conditional on prev (the
// version the gateway last committed; "" for none: create only).
func (p ObjectPut) request(r fencegate.Receipt, prev string) fencegate.PutRequest {
	return fencegate.PutRequest{Key: p.Key, Body: p.Body, Size: p.Size, ContentType: p.ContentType,
		IfMatch: prev, IfNoneMatch: prev == "", Meta: EffectMetaOf(r), UserMeta: p.UserMeta}
}

// CanStage is true for a body of at most 64 KiB on a store that stages
// (fencegate.ObjectStager); see StagingEffect.
func (p ObjectPut) CanStage() bool {
	_, ok := p.Store.(fencegate.ObjectStager)
	return ok && p.staged == nil && p.Size <= stageMax
}

// StageFor stages the write for r (fencegate.ObjectStager.Stage, with r's
// effect metadata); the ObjectPut it returns publishes it under the
// condition Apply is given. The body is rewound unless the staging
// succeeded (it failed, or panicked: the panic goes on to startStage's
// recover) and by discard, for the effect itself to read it again.
func (p ObjectPut) StageFor(ctx context.Context, r fencegate.Receipt) (Effect, func(), error) {
	staged := false
	defer func() {
		if !staged {
			p.rewind()
		}
	}()
	sp, err := p.Store.(fencegate.ObjectStager).Stage(ctx, p.request(r, "")) // its condition is the staged Put's
	if err != nil {
		return nil, nil, err
	}
	staged = true
	q := p
	q.staged = sp
	return q, func() { sp.Discard(); p.rewind() }, nil
}

// rewind puts the body back at its start. A failed rewind fails the
// effect's own size check, so nothing lands.
func (p ObjectPut) rewind() {
	if p.Body != nil {
		_, _ = p.Body.Seek(0, io.SeekStart)
	}
}

// ObjectDelete deletes an object conditionally on the version the gateway last
// committed. A key the gateway never wrote is deleted only if it is absent
// (a no-op); an object created behind the gateway's back is BACKEND_CONFLICT.
type ObjectDelete struct {
	Store fencegate.ObjectStore
	Key   string
}

// Apply performs the delete.
func (d ObjectDelete) Apply(ctx context.Context, r fencegate.Receipt, prev string) (fencegate.Outcome, error) {
	if prev == "" {
		_, err := d.Store.Head(ctx, d.Key)
		switch fencegate.ErrorCode(err) {
		case fencegate.CodeNotFound:
			return fencegate.Outcome{State: fencegate.ReceiptCommitted}, nil
		case "":
			return conflict("the object was created outside the gateway; refusing to delete it")
		}
		return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: err.Error()}, asCode(err, fencegate.CodeBackendUnavailable)
	}
	err := d.Store.Delete(ctx, d.Key, prev)
	if err == nil {
		return fencegate.Outcome{State: fencegate.ReceiptCommitted}, nil
	}
	if fencegate.ErrorCode(err) == fencegate.CodeUnsupported {
		return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: err.Error()}, err
	}
	if errors.Is(err, fencegate.ErrPreconditionFailed) {
		_, herr := d.Store.Head(ctx, d.Key)
		switch fencegate.ErrorCode(herr) {
		case fencegate.CodeNotFound:
			// Already gone: the state asked for holds (e.g. our own retried delete).
			return fencegate.Outcome{State: fencegate.ReceiptCommitted}, nil
		case "":
			return conflict("the object changed outside the gateway; refusing to delete it")
		}
		// Unread: the 412 may be our own retry's, its first attempt applied.
		return unreadAfterPrecondition(err, herr)
	}
	if errors.Is(err, fencegate.ErrNotApplied) {
		return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: err.Error()}, err
	}
	return fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: err.Error()}, err
}

// objectFailure classifies a failed conditional write by reading the object:
// the receipt's own object is COMMITTED; a failed condition is
// BACKEND_CONFLICT, or UNKNOWN when the object cannot be read (a store's
// retry meets 412 from its own first attempt); a refusal the store proves (fencegate.ErrNotApplied: never
// sent, or refused with a definite answer on its only attempt) or an invalid
// request is FAILED at once; anything else (a timeout, a 5xx, a lost answer)
// may have landed and is UNKNOWN, for the reconciler.
func objectFailure(ctx context.Context, st fencegate.ObjectStore, key string, r fencegate.Receipt, err error) (fencegate.Outcome, error) {
	info, herr := st.Head(ctx, key)
	m, named := fencegate.EffectMeta{}, false // what the object's metadata names, when it was read
	if herr == nil {
		m, named = fencegate.ParseEffectMeta(info.Metadata)
	}
	if named && m.ReceiptID == r.ID {
		return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: info.ETag}, nil
	}
	if errors.Is(err, fencegate.ErrPreconditionFailed) {
		if named && fencegate.IsShadowReceipt(m.ReceiptID) {
			msg := "the object changed outside the gateway's record (its metadata names shadow-mode forward " + m.ReceiptID + "); nothing was overwritten"
			return fencegate.Outcome{State: fencegate.ReceiptFailed, Version: info.ETag, Error: msg},
				fencegate.Wrap(&shadowWritten{receiptID: m.ReceiptID}, fencegate.CodeBackendConflict, msg)
		}
		if herr != nil && fencegate.ErrorCode(herr) != fencegate.CodeNotFound {
			// The object could not be read: a store's retry meets 412 when
			// its own first attempt landed unanswered, so this may be ours.
			return unreadAfterPrecondition(err, herr)
		}
		return conflict("the object changed outside the gateway; nothing was overwritten")
	}
	if fencegate.ErrorCode(err) == fencegate.CodeInvalidRequest || errors.Is(err, fencegate.ErrNotApplied) {
		return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: err.Error()}, err
	}
	return fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: err.Error()}, err
}

// shadowWritten marks a failed condition on an object whose metadata names
// a shadow receipt (receiptID): perhaps one of this process's shadow
// forwards whose answer and HEAD were lost, so that its version was never
// recorded. The outcome's Version is that object's ETag, which the caller
// records if the forward was its own (adoptShadowVersion): every later
// write of the key would meet the same failed condition otherwise. Nothing
// else trusts the metadata, which a writer behind the gateway's back can
// set.
type shadowWritten struct{ receiptID string }

func (e *shadowWritten) Error() string {
	return "the object names shadow receipt " + e.receiptID
}

// unreadAfterPrecondition is the UNKNOWN outcome of a failed condition
// whose object could not be read (herr): for the reconciler, which reads it.
func unreadAfterPrecondition(err, herr error) (fencegate.Outcome, error) {
	err = fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "precondition failed and the object could not be read ("+herr.Error()+")")
	return fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: err.Error()}, err
}

func conflict(msg string) (fencegate.Outcome, error) {
	return fencegate.Outcome{State: fencegate.ReceiptFailed, Error: msg}, fencegate.Errorf(fencegate.CodeBackendConflict, "%s", msg)
}

// EffectMetaOf is the metadata an object written for r carries.
func EffectMetaOf(r fencegate.Receipt) fencegate.EffectMeta {
	return fencegate.EffectMeta{FenceToken: r.FenceToken, Segment: r.Segment, Root: r.OperationRoot,
		OperationID: r.OperationID, PayloadDigest: r.PayloadDigest, ReceiptID: r.ID}
}
