package domain

import "time"

// Schema names of the two signed documents.
const (
	GrantSchema  = "lockGrant.v1"
	StatusSchema = "grantStatus.v1"
)

// Grant is the payload of a lockGrant.v1 JWS. Once signed it is immutable; the
// gateway trusts none of it until package proofs has verified the signature.
// Times are milliseconds since the Unix epoch on the registry's clock.
type Grant struct {
	Schema            string `json:"schema"`
	Resource          string `json:"resource"`
	Owner             string `json:"owner"`
	RequestID         string `json:"requestId"`
	Lease             string `json:"lease"`
	FenceToken        uint64 `json:"fenceToken"`
	BackendRevision   uint64 `json:"backendRevision"`
	PolicyGeneration  uint64 `json:"policyGeneration"`
	OperationID       string `json:"operationId"`
	OperationRoot     string `json:"operationRoot"`
	OperationCategory string `json:"operationCategory"`
	IssuerEpoch       uint64 `json:"issuerEpoch"`
	TTLMs             uint64 `json:"ttlMs"`
	IssuedAt          int64  `json:"issuedAt"`
	ExpiresAt         int64  `json:"expiresAt"`
}

// Validate checks the claims that must be present for a grant to mean anything.
// It returns a GRANT_INVALID error naming the first missing claim.
func (g *Grant) Validate() error {
	switch {
	case g.Schema != GrantSchema:
		return Errorf(CodeGrantInvalid, "grant schema must be %q", GrantSchema)
	case g.Resource == "":
		return Errorf(CodeGrantInvalid, "grant has no resource")
	case g.Owner == "":
		return Errorf(CodeGrantInvalid, "grant has no owner")
	case g.Lease == "":
		return Errorf(CodeGrantInvalid, "grant has no lease")
	case g.FenceToken == 0:
		return Errorf(CodeGrantInvalid, "grant has no fenceToken")
	case g.OperationRoot == "":
		return Errorf(CodeGrantInvalid, "grant has no operationRoot")
	case g.IssuedAt <= 0 || g.ExpiresAt <= g.IssuedAt:
		return Errorf(CodeGrantInvalid, "grant has no valid issuedAt/expiresAt")
	}
	return nil
}

// IssuedTime returns IssuedAt as a time.
func (g *Grant) IssuedTime() time.Time { return time.UnixMilli(g.IssuedAt) }

// StatusState is the registry's view of a lease at the time of a proof.
type StatusState string

// Lease states as reported by the registry.
const (
	StateHeld     StatusState = "HELD"
	StateExpired  StatusState = "EXPIRED"
	StateReleased StatusState = "RELEASED"
	StateRevoked  StatusState = "REVOKED"
)

// Status is the payload of a grantStatus.v1 JWS: a short-lived statement that
// the grant with GrantDigest was in State at Revision. IssuedAtMs and ExpiresAtMs
// are milliseconds since the Unix epoch.
type Status struct {
	Schema      string      `json:"schema"`
	GrantDigest string      `json:"grantDigest"`
	Resource    string      `json:"resource"`
	Lease       string      `json:"lease"`
	FenceToken  uint64      `json:"fenceToken"`
	State       StatusState `json:"state"`
	Revision    uint64      `json:"revision"`
	IssuerEpoch uint64      `json:"issuerEpoch"`
	IssuedAtMs  int64       `json:"iat"`
	ExpiresAtMs int64       `json:"exp"`
	// Delegation, when set, is the ID of the delegation this proof was
	// issued for, to its delegate: the registry states HELD only while the
	// lease is held and the delegation is not revoked. A delegated write
	// must carry such a proof; an owner's write must carry one without.
	Delegation string `json:"delegation,omitempty"`
}

// MaxStatusLife is the hard upper bound on a status proof's life.
const MaxStatusLife = 60 * time.Second

// MaxClockSkew is how far apart the clocks of the processes that sign and
// check (registry replicas, gateways) may be: how far a status proof's iat
// may lie ahead of a gateway's now, and how much later than another a grant
// must have been issued before a lower fence is taken for a regression.
const MaxClockSkew = 2 * time.Second

// DefaultStatusLife is the life of a status proof unless configured otherwise.
const DefaultStatusLife = 5 * time.Second

// VerifiedGrant is a grant whose signature has been checked, with the digest
// (sha256:<hex> over the exact signed payload bytes) that status proofs bind to.
type VerifiedGrant struct {
	Grant
	Digest string
	// KeyID is the trust-bundle key that signed the grant.
	KeyID string
}
