package registry

import (
	"context"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/s3cred"
)

var _ s3cred.Source = (*Registry)(nil)

// IssuesS3 tells whether the registry issues S3 credentials (Config.S3).
func (r *Registry) IssuesS3() bool { return r.s3 != nil }

// S3Credentials returns the S3 credentials of the issued lease (package
// s3cred): they work at the S3 front door while the lease is HELD. Without a
// credential key (Config.S3) it is UNSUPPORTED.
func (r *Registry) S3Credentials(is Issued) (fencegate.S3AccessKeys, error) {
	if r.s3 == nil {
		return fencegate.S3AccessKeys{}, fencegate.Errorf(fencegate.CodeUnsupported, "this registry issues no S3 credentials")
	}
	return r.s3.For(is.Lease.ID)
}

// ResolveS3 reads the lease now (one linearizable backend read) and answers
// what a gateway checks an S3 request signed with the lease's credentials
// against: the state a status proof states now (REVOKED for a revoked epoch
// or a lease from before a state loss), the lease's current grant, that
// proof, and the secret. An unknown lease is NOT_FOUND; without a credential
// key it is UNSUPPORTED. Nothing is written.
func (r *Registry) ResolveS3(ctx context.Context, leaseID string) (s3cred.Resolved, error) {
	if r.s3 == nil {
		return s3cred.Resolved{}, fencegate.Errorf(fencegate.CodeUnsupported, "this registry issues no S3 credentials")
	}
	is, err := r.Status(ctx, leaseID)
	if err != nil {
		return s3cred.Resolved{}, err
	}
	return s3cred.Resolved{State: is.State, Grant: is.Grant, StatusProof: is.StatusProof, Secret: r.s3.Secret(is.Lease.ID)}, nil
}
