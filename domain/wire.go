package domain

import "time"

// LeaseRequest is the JSON body of POST /v1/leases. The owner is the
// authenticated caller, never a field of the body.
type LeaseRequest struct {
	Resource          string `json:"resource"`
	RequestID         string `json:"requestId"`
	TTLMs             int64  `json:"ttlMs"`
	OperationID       string `json:"operationId"`
	OperationRoot     string `json:"operationRoot,omitempty"`
	OperationCategory string `json:"operationCategory,omitempty"`
	// WaitMs, when positive, long-polls: the registry waits up to WaitMs for a
	// held resource to be released or to lapse.
	WaitMs int64 `json:"waitMs,omitempty"`
	// S3Credentials asks for the lease's S3 credentials in the answer.
	S3Credentials bool `json:"s3Credentials,omitempty"`
}

// RenewRequest is the JSON body of POST /v1/leases/{lease}/renew.
type RenewRequest struct {
	TTLMs int64 `json:"ttlMs"`
	// S3Credentials asks for the lease's S3 credentials in the answer.
	S3Credentials bool `json:"s3Credentials,omitempty"`
}

// LeaseAnswer is what the lease routes answer: the lease, and for acquire,
// renew and status its signed grant and a fresh status proof.
type LeaseAnswer struct {
	Lease             string      `json:"lease"`
	Resource          string      `json:"resource"`
	Owner             string      `json:"owner"`
	RequestID         string      `json:"requestId"`
	FenceToken        uint64      `json:"fenceToken"`
	OperationID       string      `json:"operationId"`
	OperationRoot     string      `json:"operationRoot"`
	OperationCategory string      `json:"operationCategory,omitempty"`
	State             StatusState `json:"state"`
	ExpiresAt         time.Time   `json:"expiresAt"`
	Grant             string      `json:"grant,omitempty"`
	GrantDigest       string      `json:"grantDigest,omitempty"`
	StatusProof       string      `json:"statusProof,omitempty"`
	StatusExpiresAt   *time.Time  `json:"statusExpiresAt,omitempty"`
	// S3Credentials are the lease's S3 credentials, when asked for.
	S3Credentials *S3AccessKeys `json:"s3Credentials,omitempty"`
}

// S3Resolution is the registry's answer to a gateway resolving a lease's S3
// credentials (POST /v1/leases/{lease}/s3-resolve): the lease's state now, its
// current grant, a status proof signed now and the credentials' secret.
type S3Resolution struct {
	State           StatusState `json:"state"`
	Grant           string      `json:"grant"`
	StatusProof     string      `json:"statusProof"`
	SecretAccessKey string      `json:"secretAccessKey"`
}

// S3AccessKeys are a lease's S3 credentials (package s3cred), answered as
// s3Credentials by the lease routes when asked for: they sign requests to
// the S3 front door for the lease's resource while the lease is HELD, and
// stop working when it ends.
type S3AccessKeys struct {
	AccessKeyID     string `json:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey"`
}

// DelegationRequest is the JSON body of POST /v1/leases/{lease}/delegations:
// the owner (the authenticated caller) lets Delegate write under the lease's
// grant for the segment range [SegmentFrom, SegmentTo] or the set Segments,
// optionally only inside TargetPrefix. GrantDigest, when set, names which of
// the lease's grants the delegation binds (default: its current grant).
type DelegationRequest struct {
	Delegate     string   `json:"delegate"`
	GrantDigest  string   `json:"grantDigest,omitempty"`
	SegmentFrom  uint64   `json:"segmentFrom,omitempty"`
	SegmentTo    uint64   `json:"segmentTo,omitempty"`
	Segments     []uint64 `json:"segments,omitempty"`
	TargetPrefix string   `json:"targetPrefix,omitempty"`
}

// DelegationAnswer is a minted delegation: the signed token (sent by the
// delegate as Fence-Delegation, with the grant) and its claims.
type DelegationAnswer struct {
	ID         string     `json:"id"`
	Delegation string     `json:"delegation"`
	Claims     Delegation `json:"claims"`
}

// DelegationStatusRequest is the JSON body of POST
// /v1/delegations/{delegation}/status: the digest of the grant the
// delegation binds.
type DelegationStatusRequest struct {
	GrantDigest string `json:"grantDigest"`
}

// DelegationStatusAnswer is a status proof issued to a delegate for its
// delegation, with its state and expiry.
type DelegationStatusAnswer struct {
	StatusProof     string      `json:"statusProof"`
	State           StatusState `json:"state"`
	StatusExpiresAt time.Time   `json:"statusExpiresAt"`
}

// AttestBody is the JSON body of POST /v1/leases/{lease}/attest: the grant a
// gateway in query mode (or the lease's owner) asks the registry to attest
// the status of now, named by its digest; the other members may repeat the
// grant's claims and are checked against the lease's grant, never used in
// its place.
type AttestBody struct {
	GrantDigest string `json:"grantDigest"`
	Resource    string `json:"resource"`
	Owner       string `json:"owner"`
	FenceToken  uint64 `json:"fenceToken"`
	IssuerEpoch uint64 `json:"issuerEpoch"`
}

// AttestAnswer is the registry's answer to an attest: a status proof signed
// now.
type AttestAnswer struct {
	StatusProof string `json:"statusProof"`
}

// BundleSignatureHeader is the response header of GET /v1/trust-bundle
// that carries the bundle's signatures (detached JWS, one per key), joined
// by ", ": what the registry sends and a replica verifies.
const BundleSignatureHeader = "Fence-Bundle-Signature"

// BundleChain is the answer of GET /v1/trust-bundle/chain?after=V: the trust
// bundles the registry published after version After, oldest first, ending
// with the one in force, each byte for byte as signed when it was published
// (empty when V is the version in force or above). A replica verifies each
// under the bundle the one before it installed, never under itself.
type BundleChain struct {
	After   uint64       `json:"after"`
	Bundles []BundleLink `json:"bundles"`
}

// BundleLink is one published trust bundle of a BundleChain: its version,
// its document (the exact bytes GET /v1/trust-bundle served, as a JSON
// string) and its signature (the Fence-Bundle-Signature value).
type BundleLink struct {
	Version   uint64 `json:"version"`
	Bundle    string `json:"bundle"`
	Signature string `json:"signature"`
}
