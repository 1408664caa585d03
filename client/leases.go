package client

import (
	"context"
	"time"

	"github.com/fencegate/fencegate/domain"
)

// LeaseInfo is the registry's answer on a lease route: the lease, its signed
// grant and (for acquire, renew and status) a fresh status proof.
type LeaseInfo = domain.LeaseAnswer

// AcquireParams asks for a lease. RequestID makes the acquisition idempotent:
// asking again with the same RequestID returns the same lease and fence.
type AcquireParams struct {
	Resource          string
	RequestID         string
	TTL               time.Duration
	OperationID       string
	OperationRoot     string
	OperationCategory string
	// Wait, when positive, long-polls: the gateway waits up to Wait (at most a
	// minute) for a held resource to be released or to lapse. The call's
	// time limit is the HTTP client's own plus Wait.
	Wait time.Duration
	// S3Credentials asks for the lease's S3 credentials (LeaseInfo's
	// S3Credentials, Lease.S3Credentials): the access key pair an unmodified
	// S3 client signs its requests to the gateway's S3 front door with.
	S3Credentials bool
}

// Acquire is one POST /v1/leases. It does not retry; see AcquireLease for the
// recovering acquisition.
func (c *Client) Acquire(ctx context.Context, p AcquireParams) (LeaseInfo, error) {
	var out LeaseInfo
	err := c.do(ctx, request{op: "acquire", method: "POST", path: "/v1/leases", json: domain.LeaseRequest{
		Resource: p.Resource, RequestID: p.RequestID, TTLMs: p.TTL.Milliseconds(),
		OperationID: p.OperationID, OperationRoot: p.OperationRoot, OperationCategory: p.OperationCategory,
		WaitMs: p.Wait.Milliseconds(), S3Credentials: p.S3Credentials,
	}, wait: p.Wait}, &out)
	return out, err
}

// Renew is one POST /v1/leases/{lease}/renew extending the lease by ttl.
func (c *Client) Renew(ctx context.Context, lease string, ttl time.Duration) (LeaseInfo, error) {
	var out LeaseInfo
	err := c.do(ctx, request{op: "renew", method: "POST", path: "/v1/leases/" + escapeID(lease) + "/renew",
		json: domain.RenewRequest{TTLMs: ttl.Milliseconds()}}, &out)
	return out, err
}

// Release is DELETE /v1/leases/{lease}; releasing twice is not an error.
func (c *Client) Release(ctx context.Context, lease string) (LeaseInfo, error) {
	var out LeaseInfo
	err := c.do(ctx, request{op: "release", method: "DELETE", path: "/v1/leases/" + escapeID(lease)}, &out)
	return out, err
}

// LeaseStatus is GET /v1/leases/{lease}: the lease's state now with a fresh
// status proof signed whatever the state.
func (c *Client) LeaseStatus(ctx context.Context, lease string) (LeaseInfo, error) {
	var out LeaseInfo
	err := c.do(ctx, request{op: "lease status", method: "GET", path: "/v1/leases/" + escapeID(lease)}, &out)
	return out, err
}
