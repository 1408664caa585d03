package registry

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/fencegate/fencegate"
)

// Issued is a lease with its signed grant (compact JWS), the grant's digest
// and a fresh signed status proof that expires at StatusExpiresAt, stating
// State (REVOKED for a lease the backend holds under a revoked epoch or from
// before a coordination state loss).
type Issued struct {
	Lease           fencegate.Lease
	Grant           string
	GrantDigest     string
	StatusProof     string
	StatusExpiresAt time.Time
	State           fencegate.StatusState
}

// issue signs the lease's grant and a status proof of its state at now.
func (r *Registry) issue(l fencegate.Lease, now time.Time) (Issued, error) {
	a := r.auth.Issuing()
	token, digest, err := a.Signer.SignGrant(grantFor(l, a))
	if err != nil {
		return Issued{}, fencegate.Wrap(err, fencegate.CodeInternal, "sign grant")
	}
	st := r.statusFor(l, digest, a.Epoch, a, now)
	proof, err := a.Signer.SignStatus(st)
	if err != nil {
		return Issued{}, fencegate.Wrap(err, fencegate.CodeInternal, "sign status")
	}
	return Issued{Lease: l, Grant: token, GrantDigest: digest, StatusProof: proof,
		StatusExpiresAt: time.UnixMilli(st.ExpiresAtMs).UTC(), State: st.State}, nil
}

// grantFor builds the grant from the lease's acquisition facts and the
// issuing authority only, so every call for the same lease under the same
// signing epoch and policy generation gives the same payload.
func grantFor(l fencegate.Lease, a Issuing) fencegate.Grant {
	return fencegate.Grant{
		Schema:            fencegate.GrantSchema,
		Resource:          l.Resource,
		Owner:             l.Owner,
		RequestID:         l.RequestID,
		Lease:             l.ID,
		FenceToken:        l.FenceToken,
		BackendRevision:   l.Revision,
		PolicyGeneration:  a.PolicyGeneration,
		OperationID:       l.OperationID,
		OperationRoot:     l.OperationRoot,
		OperationCategory: l.OperationCategory,
		IssuerEpoch:       a.Epoch,
		TTLMs:             uint64(l.TTL.Milliseconds()),
		IssuedAt:          l.AcquiredAt.UnixMilli(),
		ExpiresAt:         l.AcquiredAt.Add(l.TTL).UnixMilli(),
	}
}

// statusFor states the lease's state at now, bound to the digest of a grant of
// grantEpoch. It lives StatusLife, but a HELD proof never outlives the lease
// itself; a grant of a revoked epoch, and a lease from before a coordination
// state loss (or any lease while grants are paused by one), is stated REVOKED.
func (r *Registry) statusFor(l fencegate.Lease, digest string, grantEpoch uint64, a Issuing, now time.Time) fencegate.Status {
	if l.State == fencegate.StateHeld && (a.Revoked[grantEpoch] || r.preLoss(l)) {
		l.State = fencegate.StateRevoked
	}
	exp := now.Add(r.statusLife)
	if l.State == fencegate.StateHeld && l.ExpiresAt.Before(exp) {
		exp = l.ExpiresAt
	}
	return fencegate.Status{
		Schema:      fencegate.StatusSchema,
		GrantDigest: digest,
		Resource:    l.Resource,
		Lease:       l.ID,
		FenceToken:  l.FenceToken,
		State:       l.State,
		Revision:    l.Revision,
		IssuerEpoch: a.Epoch,
		IssuedAtMs:  now.UnixMilli(),
		ExpiresAtMs: exp.UnixMilli(),
	}
}

// OperationRoot is the root derived for an acquisition that names none:
// "sha256:" + hex(SHA-256(operationID NUL resource NUL requestID)).
func OperationRoot(operationID, resource, requestID string) string {
	sum := sha256.Sum256([]byte(operationID + "\x00" + resource + "\x00" + requestID))
	return "sha256:" + hex.EncodeToString(sum[:])
}
