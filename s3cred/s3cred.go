// Package s3cred makes a lease an S3 credential for the S3 front door
// (package s3door), with no table to share between gateways:
//
//   - the access key ID names the lease: "FGL" + the random part of a
//     registry lease ID ("lease_" + base32), or "FGX" + base32 of any other
//     lease ID (AccessKeyID, LeaseOf);
//   - the secret access key is an HMAC of the lease ID under a key only the
//     registry holds (Deriver), so it cannot be computed from anything a
//     request, a grant or a log carries;
//   - there is no session token: the registry is asked about the lease at
//     every request anyway.
//
// Resolver is the gateway's fencegate.S3Credentials: it decodes the lease from
// the access key ID and asks the registry (Source: the in-process registry, or
// a gateway-only registry route for a replica) for the lease's state, owner,
// current grant, a fresh status proof and the secret, at every request, caching
// nothing. The identity and resource come from the grant as the trust bundle
// verifies it. So the credentials are the lease's for exactly as long as it is
// HELD: a release, expiry or revocation refuses the very next request. The
// package does no I/O itself and imports no SDK.
package s3cred

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"strings"

	"github.com/fencegate/fencegate"
)

// KeySize is the size of the registry's credential key in bytes.
const KeySize = 32

// Access key ID prefixes: FGL for a registry lease ID, FGX for any other.
const (
	prefixLease = "FGL"
	prefixOther = "FGX"
	leaseIDHead = "lease_"
	// maxLeaseID keeps an access key ID within the 128 characters AWS
	// allows (IAM AccessKey.AccessKeyId).
	maxLeaseID = 75
)

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// AccessKeyID is the access key ID of lease leaseID. It is public: knowing
// it grants nothing without the secret.
func AccessKeyID(leaseID string) (string, error) {
	if rest, ok := strings.CutPrefix(leaseID, leaseIDHead); ok && rest != "" && isBase32(rest) {
		return prefixLease + rest, nil
	}
	if leaseID == "" || len(leaseID) > maxLeaseID {
		return "", fencegate.Errorf(fencegate.CodeInvalidRequest, "lease ID of %d bytes cannot be an access key ID", len(leaseID))
	}
	return prefixOther + b32.EncodeToString([]byte(leaseID)), nil
}

// LeaseOf is the lease ID an access key ID names, or UNAUTHENTICATED for an
// access key ID that is not a lease's: a lease has exactly one access key ID
// (LeaseOf(k) == l only for k == AccessKeyID(l)).
func LeaseOf(accessKeyID string) (string, error) {
	bad := fencegate.Errorf(fencegate.CodeUnauthenticated, "access key ID %.40q is not a Fencegate lease credential", accessKeyID)
	if rest, ok := strings.CutPrefix(accessKeyID, prefixLease); ok && rest != "" && isBase32(rest) {
		return leaseIDHead + rest, nil
	}
	if rest, ok := strings.CutPrefix(accessKeyID, prefixOther); ok && rest != "" {
		id, err := b32.DecodeString(rest)
		// Only a lease's own access key ID names it: FGX of a registry lease
		// ID (whose key is FGL...) would be a second key for one lease.
		if err == nil && len(id) > 0 && len(id) <= maxLeaseID && b32.EncodeToString(id) == rest {
			if own, err := AccessKeyID(string(id)); err == nil && own == accessKeyID {
				return string(id), nil
			}
		}
	}
	return "", bad
}

func isBase32(s string) bool {
	for _, c := range s {
		if (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// Deriver derives secrets under the registry's credential key. Only the
// registry holds one; gateways learn a lease's secret from it.
type Deriver struct{ key []byte }

// NewDeriver returns a Deriver for key, which must be KeySize random bytes.
func NewDeriver(key []byte) (*Deriver, error) {
	if len(key) != KeySize {
		return nil, fencegate.Errorf(fencegate.CodeInvalidRequest, "S3 credential key must be %d bytes, not %d", KeySize, len(key))
	}
	return &Deriver{key: append([]byte(nil), key...)}, nil
}

// Secret is the secret access key of lease leaseID: base64url of 30 bytes
// of HMAC-SHA256(key, domain tag || lease ID), 40 characters like an AWS
// secret access key.
func (d *Deriver) Secret(leaseID string) string {
	m := hmac.New(sha256.New, d.key)
	m.Write([]byte("fencegate-s3-secret-v1\x00" + leaseID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:30])
}

// For returns the S3 credentials of lease leaseID.
func (d *Deriver) For(leaseID string) (fencegate.S3AccessKeys, error) {
	id, err := AccessKeyID(leaseID)
	if err != nil {
		return fencegate.S3AccessKeys{}, err
	}
	return fencegate.S3AccessKeys{AccessKeyID: id, SecretAccessKey: d.Secret(leaseID)}, nil
}

// Resolved is the registry's answer about a lease, read now: its state as a
// status proof states it (REVOKED for a grant of a revoked epoch), its
// current grant, a status proof signed now, and its secret.
type Resolved struct {
	State       fencegate.StatusState
	Grant       string
	StatusProof string
	Secret      string
}

// Source asks the registry about a lease now (linearizably). An unknown
// lease is NOT_FOUND.
type Source interface {
	ResolveS3(ctx context.Context, leaseID string) (Resolved, error)
}

// Verifier checks grants and status proofs against the trust bundle
// (proofs.Verifier implements it).
type Verifier interface {
	VerifyGrant(token string) (fencegate.VerifiedGrant, error)
	VerifyStatus(token string, g fencegate.VerifiedGrant) (fencegate.Status, error)
}

// Resolver is the gateway's fencegate.S3Credentials over a Source.
type Resolver struct {
	Verifier Verifier
	Source   Source
}

var _ fencegate.S3Credentials = (*Resolver)(nil)

// LookupS3 implements fencegate.S3Credentials. A key that names no lease is
// NOT_FOUND. The credential's Identity and Resource are the verified grant's;
// a grant that does not verify or names another lease is GRANT_INVALID. A
// lease that is not HELD still resolves (with State saying so, and its
// Status proof as the registry signed it), so that the acceptance point
// refuses a write with the precise code; every other request under it must be
// refused by the front door. A HELD whose status proof does not verify is
// STATUS_INVALID; registry faults are BACKEND_UNAVAILABLE.
func (r *Resolver) LookupS3(ctx context.Context, accessKeyID string) (fencegate.S3Credential, error) {
	lease, err := LeaseOf(accessKeyID)
	if err != nil {
		return fencegate.S3Credential{}, fencegate.Wrap(err, fencegate.CodeNotFound, "unknown access key ID")
	}
	res, err := r.Source.ResolveS3(ctx, lease)
	switch code := fencegate.ErrorCode(err); {
	case err == nil:
	case code == fencegate.CodeNotFound || code == fencegate.CodeStatusInvalid:
		return fencegate.S3Credential{}, fencegate.Errorf(fencegate.CodeNotFound, "unknown access key ID")
	default:
		return fencegate.S3Credential{}, asCode(err, fencegate.CodeBackendUnavailable)
	}
	vg, err := r.Verifier.VerifyGrant(res.Grant)
	if err != nil {
		return fencegate.S3Credential{}, asCode(err, fencegate.CodeGrantInvalid)
	}
	if vg.Lease != lease {
		return fencegate.S3Credential{}, fencegate.Errorf(fencegate.CodeGrantInvalid, "the registry answered a grant of another lease")
	}
	if res.Secret == "" {
		return fencegate.S3Credential{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "the registry answered no secret for the lease")
	}
	switch res.State {
	case fencegate.StateHeld: // only a proof that verifies says so
		if _, err := r.Verifier.VerifyStatus(res.StatusProof, vg); err != nil {
			return fencegate.S3Credential{}, asCode(err, fencegate.CodeStatusInvalid)
		}
	case fencegate.StateExpired, fencegate.StateReleased, fencegate.StateRevoked:
	default:
		return fencegate.S3Credential{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "the registry answered lease state %.20q", res.State)
	}
	return fencegate.S3Credential{AccessKeyID: accessKeyID, SecretAccessKey: res.Secret, Identity: vg.Owner,
		Grant: res.Grant, Status: res.StatusProof, Lease: lease, Resource: vg.Resource, State: res.State}, nil
}

// asCode keeps a *fencegate.Error and wraps anything else under code.
func asCode(err error, code fencegate.Code) error {
	var fe *fencegate.Error
	if errors.As(err, &fe) {
		return err
	}
	return fencegate.Wrap(err, code, string(code))
}
