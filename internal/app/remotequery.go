package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/authz"
	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/logctx"
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
	c        *client.Client // the one registry HTTP client (module client)
	verifier *proofs.Verifier
	// refresh, when set, has the registry's trust bundle fetched now, or
	// waits for a pull that just ended (App.pull): a statement signed with
	// a key this replica does not know yet (the registry rotated since the
	// last pull) is verified again under a newer bundle.
	refresh func(context.Context)
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
	proof, err := askProof(func() (string, error) {
		return q.c.Attest(ctx, g.Lease, fencegate.AttestBody{GrantDigest: g.Digest, Resource: g.Resource, Owner: g.Owner,
			FenceToken: g.FenceToken, IssuerEpoch: g.IssuerEpoch})
	})
	if err != nil {
		return fencegate.Status{}, err
	}
	// A REVOKED or EXPIRED statement is a verified answer too: the gateway
	// refuses by it (EPOCH_REVOKED for REVOKED), as with a registry in
	// process.
	return q.verify(ctx, func() (fencegate.Status, error) { return q.verifier.VerifyStatement(proof, g) })
}

// verify runs check on a statement the registry answered; one signed by a
// key this replica's bundle does not hold (proofs.ErrUnknownKey) may be
// signed with a key the registry rotated to since this replica's last pull,
// so the bundle is fetched (refresh), and check runs again if a newer
// bundle is in force then, whoever installed it. Any other failure is
// answered as it is, with no fetch on the request's path.
func (q *remoteQuerier) verify(ctx context.Context, check func() (fencegate.Status, error)) (fencegate.Status, error) {
	before := q.verifier.Bundle().Version()
	st, err := check()
	if err == nil || q.refresh == nil || !errors.Is(err, proofs.ErrUnknownKey) {
		return verified(st, err)
	}
	q.refresh(ctx)
	if q.verifier.Bundle().Version() > before {
		return verified(check())
	}
	return verified(st, err)
}

// GrantDelegationStatus is the query for a delegated write (POST
// /v1/delegations/{id}/status as a gateway): the registry refuses a revoked
// or unknown delegation (DELEGATION_INVALID, passed on), else answers a proof
// issued for the delegation, checked against the trust bundle.
func (q *remoteQuerier) GrantDelegationStatus(ctx context.Context, g fencegate.VerifiedGrant, d fencegate.Delegation) (fencegate.Status, error) {
	proof, err := askProof(func() (string, error) {
		a, err := q.c.DelegationStatus(ctx, d.ID, g.Digest)
		if err == nil && a.StatusProof == "" {
			err = &client.UncertainError{Op: "delegation status", Err: errors.New("answer carries no status proof")}
		}
		return a.StatusProof, err
	})
	if err != nil {
		return fencegate.Status{}, err
	}
	return q.verify(ctx, func() (fencegate.Status, error) { return q.verifier.VerifyDelegationStatement(proof, g, d.ID) })
}

func verified(st fencegate.Status, err error) (fencegate.Status, error) {
	var fe *fencegate.Error
	if err != nil && !errors.As(err, &fe) {
		err = fencegate.Wrap(err, fencegate.CodeStatusInvalid, "registry status proof")
	}
	return st, err
}

// askProof asks the registry for a status proof through ask, as a gateway.
// The registry's verdicts on the grant (STATUS_INVALID, DELEGATION_INVALID)
// are passed on; anything else that is not an answer (unreachable, a 5xx,
// another refusal, an answer without a proof) is BACKEND_UNAVAILABLE.
func askProof(ask func() (string, error)) (string, error) {
	proof, err := ask()
	if err == nil {
		return proof, nil
	}
	var fe *fencegate.Error
	switch {
	case errors.As(err, &fe) && (fe.Code == fencegate.CodeStatusInvalid || fe.Code == fencegate.CodeDelegationInvalid):
		return "", fencegate.Errorf(fe.Code, "registry: %s", fe.Message)
	case client.IsUncertain(err):
		return "", fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "the registry could not be asked for the grant's status")
	default:
		return "", fencegate.Errorf(fencegate.CodeBackendUnavailable, "registry refused the status query: %s", fencegate.ErrorCode(err))
	}
}

// FetchBundle reads the registry's trust bundle (GET /v1/trust-bundle, as
// a gateway identity) and its signature (Fence-Bundle-Signature, "" if
// none). Both are only offered to the authority, which installs the bundle
// only under a signature by a key of the bundle in force, and under the same
// rules as any other bundle.
func (q *remoteQuerier) FetchBundle(ctx context.Context) (bundle []byte, signature string, err error) {
	return q.c.TrustBundle(ctx, proofs.MaxBundleSize)
}

// maxChainAnswer bounds the answer of GET /v1/trust-bundle/chain: the
// registry keeps authority.ChainLength bundles, each written as a JSON
// string (fencegate.BundleLink's bundle, by encoding/json with HTML
// escaping) beside its signatures. A document a replica takes is at most
// proofs.MaxBundleSize, and its string at most twice that: the characters
// encoding/json writes as six bytes ('<', '>', '&', U+2028, U+2029, control
// characters) are never in it raw. ParseBundle takes them (in a kid or a
// revoked key ID), but the registry serves only documents
// proofs.Bundle.Marshal wrote (authority's seal), which escapes them itself
// (a \u003c then grows by one byte); the rest grows at most twofold ('"',
// '\', the indentation's newlines). Pinned by
// TestTheChainAnswerStaysWithinTwiceItsDocumentsForABundleOfEscapedCharacters.
// Each served document is at most proofs.MaxBundleSize: Marshal can grow an
// operator's document past it, but the registry publishes no bundle whose
// served document is (authority's servedDocument, pinned by
// TestAnUploadLongerThanTheLimitAsServedIsAProblemAndChangesNothing).
const maxChainAnswer = authority.ChainLength * (2*proofs.MaxBundleSize + 64<<10)

// FetchChain reads the trust bundles the registry published after version
// after (GET /v1/trust-bundle/chain, as a gateway identity), oldest first.
// They are only offered to the authority, which installs each under a
// signature by a key of the bundle the one before installed. A fetch whose
// answer was not received (a transport failure, a 5xx that is not the
// registry's problem, an answer not intact) is BACKEND_UNAVAILABLE, which
// the authority does not take for a refusal (authority.ChainFetcher); the
// registry's own problems are answered as they are (its 503 is
// BACKEND_UNAVAILABLE too, its NOT_FOUND a refusal).
func (q *remoteQuerier) FetchChain(ctx context.Context, after uint64) ([]fencegate.BundleLink, error) {
	c, err := q.c.TrustBundleChain(ctx, after, maxChainAnswer)
	if client.IsUncertain(err) {
		return nil, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "the registry could not be asked for its trust bundle chain")
	}
	return c.Bundles, err
}

// newRemoteQuerier asks the registry at base (checked by config.Validate:
// https, or http to loopback or by registryInsecureHTTP). An https
// registry's certificate is verified against rootCAs (registryCA), or the
// system roots when nil; redirects are not followed, so an answer cannot
// send the credential on to another address.
func newRemoteQuerier(base, token string, v *proofs.Verifier, rootCAs *x509.CertPool) (*remoteQuerier, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("registryURL %q is not an http(s) URL", base)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: rootCAs}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c := client.New(u.String(), token, client.WithHTTPClient(hc),
		client.WithRequestHook(func(ctx context.Context, h http.Header) {
			// The registry's log lines and spans of this query name the request it serves.
			if id := logctx.RequestID(ctx); id != "" {
				h.Set("X-Request-Id", id)
			}
			propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
		}))
	return &remoteQuerier{c: c, verifier: v}, nil
}

// ResolveS3 asks the registry, as a gateway identity, about a lease's S3
// credentials (POST /v1/leases/{lease}/s3-resolve). The answer is checked by
// s3cred.Resolver (grant and HELD status against the trust bundle); an
// unknown lease is NOT_FOUND, an unreachable registry BACKEND_UNAVAILABLE.
func (q *remoteQuerier) ResolveS3(ctx context.Context, leaseID string) (s3cred.Resolved, error) {
	a, err := q.c.ResolveS3(ctx, leaseID)
	switch {
	case err == nil:
		return s3cred.Resolved{State: a.State, Grant: a.Grant, StatusProof: a.StatusProof, Secret: a.SecretAccessKey}, nil
	case fencegate.ErrorCode(err) == fencegate.CodeNotFound && !client.IsUncertain(err):
		return s3cred.Resolved{}, fencegate.Errorf(fencegate.CodeNotFound, "unknown lease")
	case client.IsUncertain(err):
		return s3cred.Resolved{}, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, "the registry could not be asked about the S3 credential")
	default:
		return s3cred.Resolved{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "registry refused the S3 credential query: %s", fencegate.ErrorCode(err))
	}
}
