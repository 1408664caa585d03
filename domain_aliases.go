// Code generated from domain/ by the generator in scripts/gen-domain-aliases; DO NOT EDIT.

package fencegate

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/domain"
)

// The domain's types, each the same type as domain's (an alias).
type (
	AcquireRequest          = domain.AcquireRequest
	Admission               = domain.Admission
	AdmitRequest            = domain.AdmitRequest
	AttestAnswer            = domain.AttestAnswer
	AttestBody              = domain.AttestBody
	BundleChain             = domain.BundleChain
	BundleLink              = domain.BundleLink
	Code                    = domain.Code
	Compactor               = domain.Compactor
	Delegation              = domain.Delegation
	DelegationAnswer        = domain.DelegationAnswer
	DelegationRequest       = domain.DelegationRequest
	DelegationStatusAnswer  = domain.DelegationStatusAnswer
	DelegationStatusRequest = domain.DelegationStatusRequest
	EffectMeta              = domain.EffectMeta
	EffectRequest           = domain.EffectRequest
	EffectResponse          = domain.EffectResponse
	Error                   = domain.Error
	FenceStore              = domain.FenceStore
	Grant                   = domain.Grant
	GroupCommitter          = domain.GroupCommitter
	Guard                   = domain.Guard
	HighWater               = domain.HighWater
	Incarnation             = domain.Incarnation
	Lease                   = domain.Lease
	LeaseAnswer             = domain.LeaseAnswer
	LeaseBackend            = domain.LeaseBackend
	LeaseHolders            = domain.LeaseHolders
	LeaseRequest            = domain.LeaseRequest
	ObjectInfo              = domain.ObjectInfo
	ObjectLister            = domain.ObjectLister
	ObjectStager            = domain.ObjectStager
	ObjectStore             = domain.ObjectStore
	Outcome                 = domain.Outcome
	Page                    = domain.Page
	Position                = domain.Position
	PriorSettle             = domain.PriorSettle
	PriorSettling           = domain.PriorSettling
	PutRequest              = domain.PutRequest
	Quarantine              = domain.Quarantine
	QuarantinePage          = domain.QuarantinePage
	Receipt                 = domain.Receipt
	ReceiptPage             = domain.ReceiptPage
	ReceiptState            = domain.ReceiptState
	RenewRequest            = domain.RenewRequest
	ResourceState           = domain.ResourceState
	S3AccessKeys            = domain.S3AccessKeys
	S3Credential            = domain.S3Credential
	S3Credentials           = domain.S3Credentials
	S3Resolution            = domain.S3Resolution
	StagedPut               = domain.StagedPut
	StaticS3Credentials     = domain.StaticS3Credentials
	Status                  = domain.Status
	StatusState             = domain.StatusState
	TargetBindings          = domain.TargetBindings
	VerifiedGrant           = domain.VerifiedGrant
)

// The domain's constants.
const (
	BundleSignatureHeader    = domain.BundleSignatureHeader
	CodeBackendConflict      = domain.CodeBackendConflict
	CodeBackendUnavailable   = domain.CodeBackendUnavailable
	CodeDelegationInvalid    = domain.CodeDelegationInvalid
	CodeEpochRevoked         = domain.CodeEpochRevoked
	CodeFenceRegression      = domain.CodeFenceRegression
	CodeForbidden            = domain.CodeForbidden
	CodeGrantInvalid         = domain.CodeGrantInvalid
	CodeInternal             = domain.CodeInternal
	CodeInvalidRequest       = domain.CodeInvalidRequest
	CodeLeaseHeld            = domain.CodeLeaseHeld
	CodeLeaseNotHeld         = domain.CodeLeaseNotHeld
	CodeMutationUnknown      = domain.CodeMutationUnknown
	CodeNotFound             = domain.CodeNotFound
	CodeOwnerMismatch        = domain.CodeOwnerMismatch
	CodePolicyStale          = domain.CodePolicyStale
	CodeQuarantined          = domain.CodeQuarantined
	CodeReceiptSettled       = domain.CodeReceiptSettled
	CodeRequestIDConflict    = domain.CodeRequestIDConflict
	CodeResourceBusy         = domain.CodeResourceBusy
	CodeResourceMismatch     = domain.CodeResourceMismatch
	CodeSegmentOutOfOrder    = domain.CodeSegmentOutOfOrder
	CodeStaleOwner           = domain.CodeStaleOwner
	CodeStateLost            = domain.CodeStateLost
	CodeStatusInvalid        = domain.CodeStatusInvalid
	CodeStillReconciling     = domain.CodeStillReconciling
	CodeUnauthenticated      = domain.CodeUnauthenticated
	CodeUnsupported          = domain.CodeUnsupported
	DefaultPageLimit         = domain.DefaultPageLimit
	DefaultQuarantinePayload = domain.DefaultQuarantinePayload
	DefaultStatusLife        = domain.DefaultStatusLife
	DelegationSchema         = domain.DelegationSchema
	GrantSchema              = domain.GrantSchema
	LandBySlack              = domain.LandBySlack
	MaxClockSkew             = domain.MaxClockSkew
	MaxContentType           = domain.MaxContentType
	MaxDelegationSegments    = domain.MaxDelegationSegments
	MaxEffectKey             = domain.MaxEffectKey
	MaxEffectMetaSize        = domain.MaxEffectMetaSize
	MaxEffectRequestBody     = domain.MaxEffectRequestBody
	MaxEffectRequestHeader   = domain.MaxEffectRequestHeader
	MaxNameLength            = domain.MaxNameLength
	MaxPageBytes             = domain.MaxPageBytes
	MaxPageLimit             = domain.MaxPageLimit
	MaxQuarantinePayload     = domain.MaxQuarantinePayload
	MaxRetryAfter            = domain.MaxRetryAfter
	MaxStatusLife            = domain.MaxStatusLife
	MaxUserMetaSize          = domain.MaxUserMetaSize
	MetaFence                = domain.MetaFence
	MetaOperationID          = domain.MetaOperationID
	MetaPayload              = domain.MetaPayload
	MetaReceipt              = domain.MetaReceipt
	MetaRoot                 = domain.MetaRoot
	MetaSegment              = domain.MetaSegment
	MinFenceHeadroom         = domain.MinFenceHeadroom
	ReceiptCommitted         = domain.ReceiptCommitted
	ReceiptFailed            = domain.ReceiptFailed
	ReceiptNotApplied        = domain.ReceiptNotApplied
	ReceiptPending           = domain.ReceiptPending
	ReceiptUnknown           = domain.ReceiptUnknown
	ShadowReceiptPrefix      = domain.ShadowReceiptPrefix
	StateExpired             = domain.StateExpired
	StateHeld                = domain.StateHeld
	StateReleased            = domain.StateReleased
	StateRevoked             = domain.StateRevoked
	StatusSchema             = domain.StatusSchema
)

// The domain's variables: the same values (a sentinel error is the same error, errors.Is holds across both names).
var (
	Codes                 = domain.Codes
	ErrNotApplied         = domain.ErrNotApplied
	ErrPreconditionFailed = domain.ErrPreconditionFailed
)

// APITarget is domain.APITarget.
func APITarget(api, path string) string { return domain.APITarget(api, path) }

// BoundAPITarget is domain.BoundAPITarget.
func BoundAPITarget(api, path string, bound map[string]string) string {
	return domain.BoundAPITarget(api, path, bound)
}

// CanSettle is domain.CanSettle.
func CanSettle(from, to domain.ReceiptState) bool { return domain.CanSettle(from, to) }

// CheckContentType is domain.CheckContentType.
func CheckContentType(v string) error { return domain.CheckContentType(v) }

// CheckContentTypeLines is domain.CheckContentTypeLines.
func CheckContentTypeLines(lines []string) error { return domain.CheckContentTypeLines(lines) }

// CheckDelegatedSegments is domain.CheckDelegatedSegments.
func CheckDelegatedSegments(from, to uint64, set []uint64) error {
	return domain.CheckDelegatedSegments(from, to, set)
}

// CheckEffectKey is domain.CheckEffectKey.
func CheckEffectKey(k string) error { return domain.CheckEffectKey(k) }

// CheckName is domain.CheckName.
func CheckName(s string) error { return domain.CheckName(s) }

// Covers is domain.Covers.
func Covers(resource, target string) bool { return domain.Covers(resource, target) }

// DecodeHeaderText is domain.DecodeHeaderText.
func DecodeHeaderText(v string) string { return domain.DecodeHeaderText(v) }

// EncodeHeaderText is domain.EncodeHeaderText.
func EncodeHeaderText(s string) string { return domain.EncodeHeaderText(s) }

// EncodeMetaText is domain.EncodeMetaText.
func EncodeMetaText(s string) string { return domain.EncodeMetaText(s) }

// ErrorCode is domain.ErrorCode.
func ErrorCode(err error) domain.Code { return domain.ErrorCode(err) }

// ErrorMessage is domain.ErrorMessage.
func ErrorMessage(err error) string { return domain.ErrorMessage(err) }

// Errorf is domain.Errorf.
func Errorf(code domain.Code, format string, args ...any) *domain.Error {
	return domain.Errorf(code, format, args...)
}

// FencedAPIMethods is domain.FencedAPIMethods.
func FencedAPIMethods() []string { return domain.FencedAPIMethods() }

// IsFencedAPIMethod is domain.IsFencedAPIMethod.
func IsFencedAPIMethod(method string) bool { return domain.IsFencedAPIMethod(method) }

// IsShadowReceipt is domain.IsShadowReceipt.
func IsShadowReceipt(receiptID string) bool { return domain.IsShadowReceipt(receiptID) }

// KeptText is domain.KeptText.
func KeptText(s string) bool { return domain.KeptText(s) }

// LandBy is domain.LandBy.
func LandBy(ctx context.Context) (t time.Time, ok bool) { return domain.LandBy(ctx) }

// ObjectResource is domain.ObjectResource.
func ObjectResource(store, key string) string { return domain.ObjectResource(store, key) }

// ObjectTarget is domain.ObjectTarget.
func ObjectTarget(store, key string) string { return domain.ObjectTarget(store, key) }

// ParseCanonicalUint is domain.ParseCanonicalUint.
func ParseCanonicalUint(s string) (uint64, bool) { return domain.ParseCanonicalUint(s) }

// ParseCursor is domain.ParseCursor.
func ParseCursor(list, cursor string) (p domain.Position, ok bool, err error) {
	return domain.ParseCursor(list, cursor)
}

// ParseEffectMeta is domain.ParseEffectMeta.
func ParseEffectMeta(md map[string]string) (m domain.EffectMeta, ok bool) {
	return domain.ParseEffectMeta(md)
}

// QuarantineID is domain.QuarantineID.
func QuarantineID(resource string, fence, segment uint64, target, method, effectKey, payloadDigest string) string {
	return domain.QuarantineID(resource, fence, segment, target, method, effectKey, payloadDigest)
}

// QuarantinePosition is domain.QuarantinePosition.
func QuarantinePosition(q *domain.Quarantine) domain.Position { return domain.QuarantinePosition(q) }

// ReceiptPosition is domain.ReceiptPosition.
func ReceiptPosition(r *domain.Receipt) domain.Position { return domain.ReceiptPosition(r) }

// SameCallTarget is domain.SameCallTarget.
func SameCallTarget(target, base string) bool { return domain.SameCallTarget(target, base) }

// SplitAPITarget is domain.SplitAPITarget.
func SplitAPITarget(target string) (api, path string, ok bool) { return domain.SplitAPITarget(target) }

// SplitObjectTarget is domain.SplitObjectTarget.
func SplitObjectTarget(target string) (store, key string, ok bool) {
	return domain.SplitObjectTarget(target)
}

// WithLandBy is domain.WithLandBy.
func WithLandBy(ctx context.Context, t time.Time) context.Context { return domain.WithLandBy(ctx, t) }

// Wrap is domain.Wrap.
func Wrap(err error, code domain.Code, msg string) *domain.Error { return domain.Wrap(err, code, msg) }
