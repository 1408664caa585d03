package domain

import (
	"context"
	"time"
)

// S3Credential is what one S3 access key ID stands for at the S3 front door
// (package s3door): the secret its requests are signed with (AWS Signature
// Version 4) and the lease it is bound to. The front door verifies the
// signature first and uses nothing else of the credential for a request whose
// signature fails.
type S3Credential struct {
	// AccessKeyID is the key ID the client signs with (the Credential= of
	// the Authorization header or X-Amz-Credential of a presigned URL).
	AccessKeyID string
	// SecretAccessKey is the shared secret the signature is keyed with.
	SecretAccessKey string
	// SessionToken, when not "", must equal the request's
	// X-Amz-Security-Token (compared in constant time, and covered by the
	// signature); a request without it is refused.
	SessionToken string
	// Identity is the workload identity the requests act as: the caller the
	// acceptance point binds to the grant's owner, and the reader the read
	// policy is asked about. Required.
	Identity string
	// Grant is the compact JWS lockGrant.v1 of the lease the credential is
	// bound to. "" means a read-only credential: every write is refused
	// (GRANT_INVALID).
	Grant string
	// Status is a current grantStatus.v1 proof for Grant, for a gateway in
	// proof mode; "" in query mode, where the gateway asks the registry.
	// Lookup is called for every request, so an implementation in proof mode
	// returns a proof fresh enough for the write to be admitted.
	Status string
	// Lease and Resource name the lease and its resource, for logs and
	// error messages (the acceptance point trusts only the verified Grant).
	Lease    string
	Resource string
	// State is the lease's state when looked up, as the registry states it
	// (HELD, EXPIRED, RELEASED, REVOKED), never "" for a lease's
	// credential; "" in a credential that is not a lease's (a static table),
	// which is not lease-bound. A lease credential whose State is
	// not HELD still resolves, with its Grant and Status, so that a write is
	// refused by the acceptance point with the precise code (STALE_OWNER,
	// STATUS_INVALID); the front door must refuse every other request
	// signed with it (reads, lists, multipart bookkeeping) at once.
	State StatusState
	// ExpiresAt, when not zero, is when the credential stops working: a
	// request signed after it is refused (ExpiredToken).
	ExpiresAt time.Time
}

// S3Credentials resolves access key IDs for the S3 front door. The registry
// implements it with credentials minted when a lease is acquired; tests and
// `gateway dev` may use a static table.
//
// Lookup returns NOT_FOUND for a key ID it never issued or has forgotten
// (the client is answered InvalidAccessKeyId). A credential whose lease has
// ended (released, expired or superseded) should still resolve, with its
// Grant, for as long as the implementation remembers it: the acceptance
// point then refuses each write with the precise code (STALE_OWNER once a
// newer fence was accepted, else STATUS_INVALID), which the client sees in
// the S3 error's Message. Other errors (e.g. BACKEND_UNAVAILABLE) are
// answered as such and the request does nothing. Implementations are safe
// for concurrent use and are called once per request, and by the front door
// about the credentials of open multipart uploads when a
// CreateMultipartUpload would be refused TooManyUploads (at most 16 per such
// request).
type S3Credentials interface {
	LookupS3(ctx context.Context, accessKeyID string) (S3Credential, error)
}

// StaticS3Credentials is a fixed table of credentials by access key ID (for
// tests and fixed deployments). Entries never expire unless ExpiresAt says so.
type StaticS3Credentials map[string]S3Credential

// LookupS3 returns the entry of accessKeyID, or NOT_FOUND.
func (s StaticS3Credentials) LookupS3(_ context.Context, accessKeyID string) (S3Credential, error) {
	c, ok := s[accessKeyID]
	if !ok {
		return S3Credential{}, Errorf(CodeNotFound, "unknown access key ID")
	}
	return c, nil
}
