package app

import (
	"go.opentelemetry.io/otel/propagation"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fencegate/fencegate/internal/logctx"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/registry"
	"github.com/fencegate/fencegate/s3cred"
)

// remoteQuerier is query mode against a registry in another process: it asks
// the registry to attest the grant's status now (POST /v1/leases/{lease}/attest)
// and checks the signed status proof it answers against the trust bundle, so
// the answer is as linearizable as the registry's read and cannot be forged
// by the network. An unreachable registry is BACKEND_UNAVAILABLE, not a
// verdict on the lease.
type remoteQuerier struct {
	base     string
	token    string
	verifier *proofs.Verifier
	hc       *http.Client
}

var (
	_ s3cred.Source              = (*remoteQuerier)(nil)
	_ gateway.StatusQuerier      = (*remoteQuerier)(nil)
	_ gateway.DelegationQuerier  = (*remoteQuerier)(nil)
	_ gateway.DelegationQuerier  = (*registry.Registry)(nil)
	_ registry.DelegationSigner  = (*proofs.Signer)(nil)
	_ gateway.DelegationVerifier = (*proofs.Verifier)(nil)
	_ gateway.DelegateAccess     = (*authz.Policy)(nil)
	_ registry.DelegateAccess    = (*authz.Policy)(nil)
)

func (q *remoteQuerier) GrantStatus(ctx context.Context, g fencegate.VerifiedGrant) (fencegate.Status, error) {
	proof, err := q.askProof(ctx, "/v1/leases/"+url.PathEscape(g.Lease)+"/attest", map[string]any{"grantDigest": g.Digest,
		"resource": g.Resource, "owner": g.Owner, "fenceToken": g.FenceToken, "issuerEpoch": g.IssuerEpoch})
	if err != nil {
		return fencegate.Status{}, err
	}
	// A REVOKED or EXPIRED statement is a verified proof too; it still refuses.
	return verified(q.verifier.VerifyStatus(proof, g))
}

// GrantDelegationStatus is the query for a delegated write (POST
// /v1/delegations/{id}/status as a gateway): the registry refuses a revoked
// or unknown delegation (DELEGATION_INVALID, passed on), else answers a proof
// issued for the delegation, checked against the trust bundle.
func (q *remoteQuerier) GrantDelegationStatus(ctx context.Context, g fencegate.VerifiedGrant, d fencegate.Delegation) (fencegate.Status, error) {
	proof, err := q.askProof(ctx, "/v1/delegations/"+url.PathEscape(d.ID)+"/status", map[string]any{"grantDigest": g.Digest})
	if err != nil {
		return fencegate.Status{}, err
	}
	return verified(q.verifier.VerifyDelegationStatus(proof, g, d.ID))
}

func verified(st fencegate.Status, err error) (fencegate.Status, error) {
	var fe *fencegate.Error
	if err != nil && !errors.As(err, &fe) {
		err = fencegate.Wrap(err, fencegate.CodeStatusInvalid, "registry status proof")
	}
	return st, err
}

// askProof posts body to the registry's path as a gateway and returns the
// statusProof it answers. The registry's verdicts on the grant
// (STATUS_INVALID, DELEGATION_INVALID) are passed on; anything else that is
// not an answer is BACKEND_UNAVAILABLE.
func (q *remoteQuerier) askProof(ctx context.Context, path string, body any) (string, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, q.base+path, bytes.NewReader(b))
	if err != nil {
		return "", fencegate.Wrap(err, fencegate.CodeInternal, "registry query")
	}
	req.Header.Set("Authorization", "Bearer "+q.token)
	req.Header.Set("Content-Type", "application/json")
	// The registry's log lines and spans of this query name the request it serves.
	if id := logctx.RequestID(ctx); id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := q.hc.Do(req)
	if err != nil {
		return "", fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "the registry could not be asked for the grant's status")
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "registry answer unreadable")
	}
	switch {
	case resp.StatusCode >= 500:
		return "", fencegate.Errorf(fencegate.CodeBackendUnavailable, "registry answered %d to a status query", resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		var p struct {
			Code   fencegate.Code `json:"code"`
			Detail string         `json:"detail"`
		}
		_ = json.Unmarshal(raw, &p)
		if p.Code == fencegate.CodeStatusInvalid || p.Code == fencegate.CodeDelegationInvalid {
			return "", fencegate.Errorf(p.Code, "registry: %s", p.Detail)
		}
		return "", fencegate.Errorf(fencegate.CodeBackendUnavailable, "registry refused the status query: %d %s", resp.StatusCode, p.Code)
	}
	var a struct {
		StatusProof string `json:"statusProof"`
	}
	if err := json.Unmarshal(raw, &a); err != nil || a.StatusProof == "" {
		return "", fencegate.Errorf(fencegate.CodeBackendUnavailable, "registry answer carries no status proof")
	}
	return a.StatusProof, nil
}

// FetchBundle reads the registry's trust bundle (GET /v1/trust-bundle, as
// a gateway identity). The document is only offered to the authority, which
// installs it under the same rules as any other bundle.
func (q *remoteQuerier) FetchBundle(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, q.base+"/v1/trust-bundle", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+q.token)
	resp, err := q.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, proofs.MaxBundleSize+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("registry answered %d to GET /v1/trust-bundle: %.200s", resp.StatusCode, raw)
	}
	return raw, nil
}

func newRemoteQuerier(base, token string, v *proofs.Verifier) (*remoteQuerier, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("registryURL %q is not an http(s) URL", base)
	}
	return &remoteQuerier{base: u.String(), token: token, verifier: v, hc: &http.Client{Timeout: 5 * time.Second}}, nil
}

// ResolveS3 asks the registry, as a gateway identity, about a lease's S3
// credentials (POST /v1/leases/{lease}/s3-resolve). The answer is checked by
// s3cred.Resolver (grant and HELD status against the trust bundle); an
// unknown lease is NOT_FOUND, an unreachable registry BACKEND_UNAVAILABLE.
func (q *remoteQuerier) ResolveS3(ctx context.Context, leaseID string) (s3cred.Resolved, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, q.base+"/v1/leases/"+url.PathEscape(leaseID)+"/s3-resolve", nil)
	if err != nil {
		return s3cred.Resolved{}, fencegate.Wrap(err, fencegate.CodeInternal, "registry query")
	}
	req.Header.Set("Authorization", "Bearer "+q.token)
	resp, err := q.hc.Do(req)
	if err != nil {
		return s3cred.Resolved{}, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "the registry could not be asked about the S3 credential")
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return s3cred.Resolved{}, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "registry answer unreadable")
	}
	if resp.StatusCode != http.StatusOK {
		var p struct {
			Code fencegate.Code `json:"code"`
		}
		_ = json.Unmarshal(raw, &p)
		if p.Code == fencegate.CodeNotFound {
			return s3cred.Resolved{}, fencegate.Errorf(fencegate.CodeNotFound, "unknown lease")
		}
		return s3cred.Resolved{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "registry refused the S3 credential query: %d %s", resp.StatusCode, p.Code)
	}
	var a fencegate.S3Resolution
	if err := json.Unmarshal(raw, &a); err != nil {
		return s3cred.Resolved{}, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "registry answer undecodable")
	}
	return s3cred.Resolved{State: a.State, Grant: a.Grant, StatusProof: a.StatusProof, Secret: a.SecretAccessKey}, nil
}
